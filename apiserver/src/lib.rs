//! An in-process Kubernetes API server for tests: the real REST protocol over HTTP on
//! loopback, so controllers are tested through kube-client exactly as they run against a
//! cluster, with no binaries to download and no cluster to start. It depends on kube-client
//! and k8s-openapi only: a kube-runtime controller, a hand-written kube-client loop, kubectl
//! and client-go programs all run on it. [ctrlkit](https://docs.rs/ctrlkit) re-exports it as
//! `ctrlkit::testing` (its `testing` feature); ctrlkit's own tests run on it, and
//! `cargo run --example pods` in ctrlkit's repository plays its demo on it when no cluster is
//! configured.
//!
//! It answers as kube-apiserver v1.36 does with its default flags (and claims 1.36 at
//! `/version`): where 1.36 and 1.20 differ, the shared protocol suite checks each real
//! server's own behaviour and this server follows 1.36's. The differences it keeps are listed
//! under "Known gaps" below.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use ctrlkit_apiserver::ApiServer;
//! use k8s_openapi::api::core::v1::Pod;
//! use kube_client::{Api, api::PostParams};
//!
//! let server = ApiServer::start().await?;
//! let pods: Api<Pod> = Api::namespaced(server.client(), "default");
//! let pod = serde_json::from_value(serde_json::json!({
//!     "metadata": { "name": "web-0" },
//!     "spec": { "containers": [{ "name": "web", "image": "nginx" }] }
//! }))?;
//! pods.create(&PostParams::default(), &pod).await?;
//! server.faults().close_watches(); // test how your controller recovers
//! # Ok(()) }
//! ```
//!
//! With the `harness` feature, the `harness` module runs an operator's test cases on this
//! server and, when `CTRLKIT_E2E_KUBECONFIG` names a kubeconfig, on that real server too: the
//! harness this crate's protocol suite and ctrlkit's end-to-end suite run on.
//!
//! ## What it serves
//! - OpenAPI: `/openapi/v3` and its per-group-version documents, `/openapi/v2` (JSON), from
//!   Kubernetes 1.36.2's published documents, with each CustomResourceDefinition's schema
//!   added while it is served (see the `openapi` module's docs): `kubectl apply -f`,
//!   `create -f`, `diff -f`, `explain` and `apply --server-side` work with kubectl's default
//!   validation, for built-in kinds and CRDs' kinds alike.
//! - Server-side field validation (`fieldValidation=Strict|Warn|Ignore`, the default `Warn`):
//!   unknown and duplicate fields of a create, update, apply or merge patch are warned of in
//!   `Warning` headers or, when strict, refused with 400 (see `http::field_validation`).
//! - Dry runs (`dryRun=All`, in the query or a delete's options) of every write: answered as
//!   the write would be, nothing stored.
//! - Discovery (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`), enough
//!   for kubectl's `get`, `get -w`, `create`, `apply`, `diff`, `explain`, `label`, `annotate`,
//!   `patch`, `delete`, `api-resources`, `-n` and `-A`.
//! - core/v1 pods, namespaces, configmaps, secrets, services, serviceaccounts, events;
//!   apps/v1 deployments, replicasets, statefulsets, daemonsets; batch/v1 jobs;
//!   coordination.k8s.io/v1 leases; events.k8s.io/v1 events; any type registered with
//!   [`ApiServerBuilder::resource`]; and the kinds of CustomResourceDefinitions
//!   (`apiextensions.k8s.io/v1`) created through the API, served from their creation (with the
//!   `Established` condition the real server writes) until their deletion, which deletes their
//!   objects. Objects are stored as JSON, so any kind works.
//! - create (201; uid, creationTimestamp, resourceVersion, generation 1; `generateName`; 409
//!   AlreadyExists; 404 for a missing namespace; 422 for an invalid name), get (404 NotFound),
//!   update (409 Conflict on a stale resourceVersion; generation grows only when something
//!   outside metadata and status changes), patch (merge, JSON, strategic merge), delete
//!   (finalizers hold an object with a deletionTimestamp until they are removed; a pod is
//!   first marked with its deletionTimestamp, which watchers see as `MODIFIED`, then removed;
//!   a completed delete answers with the object for pods, namespaces, services, service
//!   accounts and the few other kinds the real server answers so, and with a `Status` for the
//!   others), delete collection, server-side apply (`fieldManager`,
//!   ownership in `managedFields`, 409 conflicts naming managers and fields, `force`, removal
//!   of fields a manager stops applying, merge keys, create on apply, `dryRun=All`, `/status`;
//!   see the `apply` module's docs), the `/status` subresource (built-in kinds
//!   take status and metadata through it, custom resources status alone; neither takes spec).
//!   Errors are `metav1.Status` objects; a body over 3 MiB is 413 `RequestEntityTooLarge`
//!   and a ConfigMap holding more than 1 MiB 422, as on the real server. The `/scale` subresource of deployments, replicasets
//!   and statefulsets (an `autoscaling/v1` `Scale`: get, update with a resourceVersion
//!   precondition, patch; `spec.replicas` 0 or more, else 422), which `kubectl scale` uses.
//! - list with one global resourceVersion counter shared by all kinds, `limit` + `continue`
//!   (a continued list is a consistent snapshot at the first page's resourceVersion, even
//!   under concurrent writes), `remainingItemCount`, label and field selectors,
//!   `resourceVersion` / `resourceVersionMatch`. As on 1.36, lists, continue tokens and
//!   exact-version lists are answered from the watch cache's window: storage compaction
//!   ([`Faults::compact_storage`], `etcdctl compact` on a real server) expires them (410) only
//!   for resources served [`without_watch_cache`](ApiServerBuilder::without_watch_cache)
//!   (1.20 read them from etcd, so they expired for every resource); [`Faults::compact`]
//!   expires every resource's history, the watch cache's included.
//! - watch from a resourceVersion (every change after it, then live ones; 410 as an `ERROR`
//!   event when it is older than the history), bookmarks (every bookmark interval and 2 s
//!   before the watch's timeout, once something changed after its start), `timeoutSeconds`,
//!   selector transitions as `ADDED` / `DELETED`, and streaming lists (`sendInitialEvents`
//!   with `resourceVersionMatch=NotOlderThan`; with bookmarks allowed, the initial events end
//!   with a bookmark annotated `k8s.io/initial-events-end`). As on 1.36, a watch without a
//!   resourceVersion (or at `0`) that allows bookmarks also ends its initial `ADDED` events
//!   with that bookmark.
//! - Server-side shard selectors (KEP-5866, alpha in 1.36 behind `ShardedListAndWatch`, here
//!   always on): `shardSelector=shardRange(object.metadata.uid,'0x…','0x…')`, OR-ed with
//!   `||`, filters lists and watches by the FNV-1a 64 hash of the field, and a list echoes the
//!   selector in `metadata.shardInfo`; see the `shards` module.
//! - Metadata only: `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`
//!   for lists and `…;as=PartialObjectMetadata;…` for objects and watch events (bookmarks
//!   included), `v1` or `v1beta1`; the first form of `Accept` this server produces wins, and a
//!   form that does not fit (a list as one object) is 406, as on the real server.
//! - Tables (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, what `kubectl get`
//!   asks for): the real server's columns and cells for every built-in kind served (pods with
//!   READY, STATUS, RESTARTS and the `-o wide` ones; configmaps' DATA; namespaces' STATUS; …),
//!   a CRD's `additionalPrinterColumns`, `includeObject`, one-row tables in watches.
//! - Protobuf (`application/vnd.kubernetes.protobuf`) for the built-in kinds: request bodies
//!   (what kubectl's generator commands and client-go's protobuf clients send), and answers
//!   (objects, lists, `Status`, watch frames) negotiated as kube-apiserver negotiates them:
//!   the first `Accept` clause by q that the endpoint produces, so client-go's
//!   `protobuf,json` gets protobuf for a built-in kind, JSON for a custom resource, and an
//!   error as a protobuf `Status` for either; see the `http::negotiate` and `protobuf`
//!   modules' docs.
//! - Deletes' `propagationPolicy` (`Foreground`, `Background`, `Orphan`, or the deprecated
//!   `orphanDependents`): the owner is held by the `foregroundDeletion` or `orphan`
//!   finalizer, as the real server holds it, and an unknown policy is 422. With
//!   [`ApiServerBuilder::garbage_collector`], kube-controller-manager's garbage collector
//!   carries the policies out: dependents whose owners are gone are deleted, foreground
//!   deletes wait for the dependents that block them (`blockOwnerDeletion`), orphaning
//!   deletes take the owner out of its dependents' `ownerReferences`.
//! - Admission webhooks (`admissionregistration.k8s.io/v1` validating and mutating webhook
//!   configurations, defaulted and validated as v1.36 does): a write of any other kind goes
//!   to the webhooks whose rules (operations, groups, versions, resources and subresources,
//!   scope), `namespaceSelector` and `objectSelector` match it, at its `clientConfig.url`
//!   over HTTPS trusting its `caBundle`, within `timeoutSeconds`: mutating ones first (JSON
//!   patches, `reinvocationPolicy: IfNeeded` honoured), then validating ones; denials,
//!   warnings, `failurePolicy` and dry runs as on the real server, with its messages (see the
//!   `admission` module's docs).
//! - CustomResourceDefinitions with several versions: each object is stored once, at the
//!   storage version, and read, listed, watched, written and patched at every served version,
//!   converted as `spec.conversion` says (`None`: `apiVersion` rewritten; `Webhook`: a
//!   `ConversionReview` to its `clientConfig.url`), failures worded as the real server's
//!   (see the `conversion` module).
//! - `TokenReview` and `SubjectAccessReview`, for the users given to
//!   [`ApiServerBuilder::user`], decided by RBAC over stored ClusterRoles, Roles and their
//!   bindings (see the `auth` module); the server itself authenticates no request.
//! - [`Faults`]: close watches, fail requests (500 or 429 with `Retry-After`), compact the
//!   history, add latency, corrupt watch streams, make a handler or a watch panic.
//! - A handler's panic is answered 500 in kube-apiserver's words, logged and counted
//!   ([`ApiServer::handler_panics`]); a panic in a watch's events (JSON or protobuf) is
//!   counted and logged alike and ends that watch with an `ERROR` event carrying a 500
//!   `Status`; the server serves on.
//!
//! ## Known gaps, against a real kube-apiserver
//! The protocol suite (this crate's `tests/apiserver`) runs against this server and two real
//! kube-apiservers (v1.36.2 and v1.20.2 with etcd, the repository's `scripts/e2e.sh`); what it
//! found is fixed, or below.
//! - A protobuf body for a custom resource is answered 400, as 1.20 answers it; 1.36.2 panics
//!   decoding it (a nil dereference in its custom resource handler) and closes the connection
//!   without an answer.
//! - No authentication or authorization; no admission plugins but the two webhook ones; no
//!   validation beyond names and types (and webhook configurations').
//! - Admission webhooks: a delete-collection is admitted whole before anything is deleted
//!   (the real server deletes up to a denial); `matchConditions` are not evaluated; a `service` reference cannot be called; under `matchPolicy:
//!   Equivalent` a CRD's storage version is the one equivalent of the version written (the
//!   real server would find any other version the rules name).
//! - A CRD version other than the storage version takes no server-side apply (400).
//! - No controllers but the opt-in garbage collector: a Deployment makes no ReplicaSet, a Job
//!   no Pod, and no status is written but by clients, as on a kube-apiserver without
//!   kube-controller-manager; deleting a
//!   namespace removes it and its objects at once (the real one
//!   stays `Terminating` until its finalizer is removed); a pod with `spec.nodeName` is deleted
//!   at once (the real one gets a 30 s grace period); a new pod's status is reset to
//!   `Pending`, as on a real server with no scheduler.
//! - A built-in object is kept as the JSON of its Go type, as the real server answers it
//!   (a ConfigMap's `data: {}`, an empty list, `""` or `0` in an `omitempty` field left out,
//!   fields the type lacks dropped, times to the second), for the kinds with a protobuf
//!   message (`ctrlkit_protobuf::has_message`: every built-in kind it serves); custom
//!   resources, and a body the message does not fit, are kept as written.
//! - `generation` is kept for every kind (the real server leaves it unset for kinds without a
//!   spec, such as ConfigMaps).
//! - `managedFields` are computed for server-side apply only (see below); other writes store
//!   them as sent. So an update whose only change the server discards (status sent to the
//!   main endpoint) writes nothing here; the real server records the request in
//!   managedFields, which is a write with a new resourceVersion. (Empty metadata lists and
//!   maps, such as `finalizers: []`, are dropped as the real server drops them; a JSON patch
//!   `test` of a missing path against `null` passes, as in its JSON patch library.)
//! - Server-side apply tracks the ownership of appliers only: creates, updates and other
//!   patches neither record an `Update` manager nor take fields from appliers, so they never
//!   cause an apply conflict; `/scale` takes no apply. A custom resource's lists merge by
//!   its CRD's `x-kubernetes-list-type` (`map` by its keys, `set`, `atomic`), but its maps are
//!   always granular (`x-kubernetes-map-type: atomic` is not read).
//! - Pods carry `metadata.generation`, as from Kubernetes 1.33; older servers leave it unset
//!   for pods.
//! - Pod specs may change freely (the real server allows only images and a few other fields).
//! - Objects are taken nested up to 512 levels (the real server: 10,000, Go's decoder's
//!   limit), so that `serde_json::Value`'s recursion stays within a 2 MiB thread stack; deeper
//!   ones are refused as the real server refuses those past 10,000. Of an object's fields,
//!   `metadata` and its maps and lists, a built-in kind's `spec` and `status`, and a
//!   ConfigMap's and a Secret's data are checked to be of their Go types, by every write verb,
//!   with the real server's answers; the others are not (the real server decodes each field
//!   into its Go type).
//! - Built-in workload kinds get no defaults (the real server fills in `strategy`,
//!   `revisionHistoryLimit`, the pod template's defaults) and no validation of their spec;
//!   custom resources' `/scale` subresource is not served.
//! - Strategic merge ignores `$setElementOrder` and `$retainKeys`; its merge keys come from a
//!   table of the common built-in fields, not from the OpenAPI schema.
//! - List items carry `kind` and `apiVersion` (the real server omits them for built-in
//!   kinds); clients decode either.
//! - No CBOR; protobuf for the built-in kinds' messages of Kubernetes v1.36.2, negotiated as
//!   the real server does (see the `http` module's `negotiate`) but for a specific type at a
//!   lower q than a wildcard before it. `/openapi/v2` is JSON only (the real server also answers its protobuf
//!   form). Field validation reads field names, not types or values, and not JSON patches; a duplicate key in a JSON
//!   body keeps its last value, where the real server merges two objects under one key.
//!   Tables' column descriptions are
//!   short, not the OpenAPI documentation; printer columns take simple JSONPaths only
//!   (`.spec.size`, `.status.items[0].name`); a pod's STATUS covers the phase, container
//!   waiting and terminated reasons and `Terminating`, not every case kubectl's printer knows.
//! - `events.k8s.io/v1` and `core/v1` Events are two stores (the real server keeps one and
//!   serves it through both), so `kubectl get events` lists only core/v1 ones here.
//! - Of a CRD's schema only the types of values are checked (a `spec` that is a string is
//!   a 422, as on the real server), not formats, patterns, enums, bounds or CEL rules, and
//!   its defaults are not applied; its delete is immediate (the real server keeps it `Terminating` while it deletes the objects).
//! - A bookmark carries the store's newest resourceVersion, of any kind; the real server's
//!   carries the newest it has seen of the watched resource. Both are valid resume points.
//! - A watch from resourceVersion `0` sends the current objects ordered by namespace and
//!   name; the real server sends its watch cache's order.
//! - A list at a resourceVersion newer than the store answers 504 at once (the real server
//!   waits a few seconds first).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

// How it is built, bottom to top, one folder per module below; each folder's `mod.rs` states
// its layer's contract. A module imports only modules of its own layer or below
// (`scripts/check-cycles.py apiserver/src --layers` reads the lines below, so they are the
// check), and none imports one that imports it back (the same script without `--layers`).
// What one kind does is a hook of its `Strategy`, in `registry/<group>/` (kube-apiserver's
// `strategy.go` per kind and its TableConvertors); `scripts/check-kind-rules.py` flags the
// common ways another file could test a kind's group, plural or kind, but the few it exempts.
// layer 0: model, storage, merge, protobuf
// layer 1: auth, registry
// layer 2: admission, conversion, webhook
// layer 3: http, faults
// layer 4: server
// layer 5: harness, fixtures, wait
mod admission;
mod auth;
mod conversion;
mod faults;
pub mod fixtures;
#[cfg(feature = "harness")]
pub mod harness;
mod http;
mod merge;
mod model;
mod protobuf;
mod registry;
mod server;
mod storage;
mod wait;
mod webhook;

pub use faults::Failure;
pub use faults::injection::Faults;
pub use model::resources::{PrinterColumn, ResourceType};
pub use server::{ApiServer, ApiServerBuilder, ApiServerError, RequestCounts};
pub use wait::{WaitError, wait_for};

/// The README's example, compiled as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
