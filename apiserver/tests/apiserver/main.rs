//! The API server protocol, checked through kube-client as controllers use it: one suite,
//! run against the embedded server and, when one is configured, a real kube-apiserver
//! (see `tests/support`).

use std::process::ExitCode;

use support::Needs;

mod admission;
mod apply;
mod builtin;
mod common;
mod crd;
mod crud;
mod faults;
mod kubectl;
mod list;
mod metadata;
mod protobuf;
mod shapes;
#[path = "../support/mod.rs"]
mod support;
mod tables;
mod wait;
mod watch;

fn main() -> ExitCode {
    let mut all = cases![Needs::Protocol;
        crud::create_sets_server_fields_and_the_path_namespace,
        crud::create_refuses_duplicates_missing_namespaces_and_bad_names,
        crud::errors_are_status_objects_with_code_reason_and_message,
        crud::update_conflicts_on_a_stale_version_and_status_goes_through_its_subresource,
        crud::patches_merge_json_and_strategic,
        crud::status_patch_changes_status_and_labels_but_not_spec,
        crud::delete_with_finalizers_waits_for_them,
        crud::delete_preconditions_and_collections,
        crud::propagation_policies_hold_the_owner_with_their_finalizers,
        crud::custom_resources_work_with_dynamic_objects_and_count_generations,
        crud::bodies_over_the_limit_are_413_and_configmaps_over_a_mebibyte_422,
        crud::field_validation_warns_of_or_refuses_unknown_and_duplicate_fields,
        crud::dry_runs_are_answered_and_store_nothing,
        list::one_resource_version_sequence_is_shared_by_all_kinds,
        list::continued_pages_are_a_consistent_snapshot_under_concurrent_writes,
        list::label_and_field_selectors_filter_lists,
        list::shard_selectors_split_lists_and_watches_by_the_uids_hash,
        list::resource_version_semantics_of_lists,
        watch::a_watch_from_a_version_replays_every_later_change_in_order_then_live_ones,
        watch::a_watch_without_a_version_starts_with_the_current_objects,
        watch::bookmarks_come_before_the_timeout_and_carry_newer_versions,
        watch::objects_that_stop_or_start_matching_arrive_as_deleted_or_added,
        watch::field_selected_watches_see_only_their_object,
        watch::streaming_lists_send_initial_events_then_a_marked_bookmark_then_changes,
        watch::streaming_lists_without_not_older_than_are_refused,
        watch::streaming_lists_without_bookmarks_send_the_initial_events_alone,
        kubectl::kubectl_creates_gets_labels_patches_watches_and_deletes,
        kubectl::kubectl_scales_applies_server_side_and_finds_workloads_by_short_name,
        kubectl::kubectl_generators_create_namespaces_configmaps_and_secrets,
        kubectl::kubectl_applies_diffs_and_explains_with_its_default_validation,
        crd::a_created_definition_serves_its_kind_until_it_is_deleted,
        crd::a_definition_with_two_versions_serves_each_object_at_both,
        admission::webhook_configurations_are_defaulted_or_refused_naming_each_field,
        builtin::workload_kinds_serve_status_and_scale,
        builtin::a_secret_keeps_its_type_and_an_immutable_one_its_data,
        shapes::deep_objects_are_kept_and_ones_past_the_decoders_limit_refused,
        shapes::a_spec_or_metadata_that_is_not_an_object_is_refused_in_objects_and_scales,
        apply::server_side_apply_owns_conflicts_forces_and_removes,
        apply::server_side_apply_merges_containers_by_name_and_applies_status,
        protobuf::protobuf_bodies_create_update_and_delete_built_in_kinds,
        protobuf::clients_accepting_only_protobuf_get_it_and_custom_resources_refuse_it,
        tables::tables_have_the_real_servers_columns_and_cells,
        tables::a_custom_resource_table_shows_its_printer_columns,
        metadata::metadata_lists_and_gets_carry_only_metadata,
        metadata::metadata_forms_that_do_not_fit_the_request_are_refused,
        metadata::metadata_watches_send_partial_objects_and_bookmarks,
        metadata::a_watch_asked_for_as_a_list_ends_without_events,
        wait::wait_for_sees_later_changes_deletions_and_times_out_naming_its_wait,
    ];
    all.extend(cases![Needs::Compaction;
        list::continue_tokens_expire_at_compaction_unless_the_watch_cache_serves_them,
        list::exact_lists_expire_at_compaction_unless_the_watch_cache_serves_them,
        watch::a_watch_from_a_compacted_version_gets_an_error_event_with_410,
    ]);
    all.extend(cases![Needs::Embedded;
        crud::deleting_a_namespace_deletes_its_objects,
        faults::close_watches_ends_open_streams,
        faults::fail_next_fails_that_many_requests_with_500_or_429,
        faults::latency_delays_responses,
        faults::malformed_lines_and_error_events_reach_open_watches,
    ]);
    support::harness::main(all)
}
