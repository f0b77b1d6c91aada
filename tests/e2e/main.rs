//! End to end: ctrlkit's informer, controller and the pod example against an API server,
//! through kube-client and as a process. Every case runs on the embedded server and, when
//! one is configured (`scripts/e2e.sh`), on a real kube-apiserver with etcd.

use std::process::ExitCode;

use support::Needs;

#[cfg(feature = "webhook")]
mod admission;
mod chaos;
mod common;
mod controller;
mod convergence;
#[cfg(feature = "metrics")]
mod events;
mod example;
mod factory;
mod finalizer;
mod informer;
mod leaderelection;
#[cfg(feature = "secure-metrics")]
mod secure_metrics;
#[cfg(feature = "webhook")]
mod serving;
mod sharding;
mod sources;
#[path = "../support/mod.rs"]
mod support;
mod user_agent;
mod webhooks;

fn main() -> ExitCode {
    // Run again by the chaos harness as one of its replicas.
    if let Ok(spec) = std::env::var(support::chaos::REPLICA_ENV) {
        return support::chaos::replica_main(&spec);
    }
    // Run again as a webhook server with few descriptors.
    #[cfg(feature = "webhook")]
    if std::env::var_os(serving::HELPER_ENV).is_some() {
        return serving::helper_main();
    }
    let mut all = cases![Needs::Protocol;
        informer::the_initial_list_is_paginated,
        informer::a_cut_watch_resumes_from_its_version_without_a_relist,
        informer::bookmarks_move_the_resume_version_on,
        informer::streaming_lists_sync_or_fall_back_to_list_and_watch,
        controller::a_stale_update_conflicts_and_the_retry_succeeds,
        controller::a_reconcile_after_its_own_write_waits_for_the_cache_to_hold_it,
        factory::two_controllers_and_a_handler_share_one_list_and_one_watch_per_kind,
        factory::a_metadata_informer_caches_only_metadata,
        #[cfg(feature = "metrics")]
        events::repeated_events_form_one_series_and_floods_are_filtered,
        finalizer::the_finalizer_is_added_before_apply_and_removed_after_cleanup,
        finalizer::a_failed_cleanup_keeps_the_finalizer_and_an_unfinalized_delete_is_not_blocked,
        finalizer::a_stale_cache_cannot_drop_another_finalizer,
        leaderelection::three_candidates_one_leader_and_failover_on_death_and_on_shutdown,
        leaderelection::a_leader_cut_off_from_the_server_steps_down_before_its_lease_expires,
        leaderelection::two_replicas_with_one_hostname_and_pid_1_elect_one_leader,
        sources::owned_objects_enqueue_their_controlling_owner,
        sources::mappers_triggers_and_predicates_decide_what_is_reconciled,
        example::the_checked_in_crd_is_the_one_the_type_generates_and_the_server_takes_it,
        example::the_pod_example_prints_client_gos_lines_as_kubectl_changes_pods,
        example::the_configmap_sets_example_keeps_its_configmaps_as_kubectl_changes_them,
        example::three_operator_replicas_fail_over_record_events_and_finalize,
        example::three_sharded_operator_replicas_share_the_sets_and_outlive_a_kill,
        sharding::a_shard_selector_ring_splits_reconciles_by_uid_and_caches_where_the_server_can,
        chaos::a_leader_elected_replica_set_under_chaos_never_reconciles_without_the_lease,
        chaos::a_ring_of_labels_under_chaos_never_reconciles_a_key_twice_at_once,
        chaos::a_ring_of_shard_selectors_under_chaos_never_reconciles_a_key_twice_at_once,
        #[cfg(feature = "webhook")]
        admission::webhooks_are_called_in_order_and_their_answers_and_failures_reach_the_client,
        #[cfg(feature = "webhook")]
        admission::match_policies_decide_at_which_version_a_webhook_sees_a_write,
        #[cfg(feature = "webhook")]
        admission::scale_writes_and_collection_deletes_are_admitted,
        #[cfg(feature = "webhook")]
        admission::a_webhook_patch_that_leaves_no_object_is_refused,
        #[cfg(feature = "secure-metrics")]
        secure_metrics::a_scrape_is_let_in_by_token_review_and_subject_access_review,
    ];
    all.extend(cases![Needs::Compaction;
        informer::an_expired_version_relists_and_delivers_tombstones,
        convergence::seeded_mutations_under_faults_converge,
    ]);
    all.extend(cases![Needs::Embedded;
        #[cfg(feature = "webhook")]
        serving::a_server_out_of_descriptors_waits_instead_of_spinning,
    ]);
    all.extend(cases![Needs::AuditLog;
        user_agent::every_request_names_its_binary_and_a_client_can_name_its_controller,
    ]);
    all.extend(cases![Needs::Webhooks;
        webhooks::the_example_webhooks_refuse_default_and_convert_what_kubectl_writes,
    ]);
    support::harness::main(all)
}
