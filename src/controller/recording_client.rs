//! [`recording_client`]: a `kube_client::Client` whose writes made inside a reconcile are
//! recorded in its [`ReconcileContext`], so that the key's next reconcile reads them back
//! (see the `own_writes` module).
//!
//! A tower layer on the client's service, as the User-Agent's is. kube-client runs its service
//! behind `tower::Buffer`, whose worker task calls `call()`; the future `call()` returns is
//! polled by the caller's task, so the reconcile's context is read there, not in `call()`.
//! Creates, updates, patches and deletes of one object are recorded (not dry runs, nor
//! deletes of a collection) before they are sent, as client-go raises an expectation before
//! a create: from the request (the path's name; a create's name or `generateName` and
//! controlling owner from its body). A success's answer is read whole to learn the name,
//! version and owner, settles the record, and is handed on unchanged; a refusal (a 4xx)
//! withdraws it, as does a server error other than a 504; a write whose answer is lost (the
//! reconcile's future dropped at its timeout, a dropped connection, a 504 after the commit,
//! which is the only server error client-go keeps an expectation for) stays recorded
//! unanswered, and holds the next reconcile as the `own_writes` module tells. Outside a reconcile
//! (or from a task a reconcile spawned) the client sends as the one it wraps.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Method;
use kube_client::Client;
use kube_client::client::Body;
use serde::Deserialize;

use super::context::ReconcileContext;
use super::recorded_write::{Verb, Write};
use crate::cache::ObjectKey;

/// `client`, recording the writes each reconcile makes through it for the controller that
/// runs the reconcile: its next reconcile of that key waits until the controller's caches
/// hold them (see [`Config::stale_cache_timeout`](super::Config::stale_cache_timeout)).
/// Hand it to the reconciler and write through it; reads pass through untouched.
pub fn recording_client(client: Client) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(RecordWrites { inner: client }, namespace)
}

#[derive(Clone)]
struct RecordWrites {
    inner: Client,
}

type Sent = Pin<Box<dyn Future<Output = Result<http::Response<Body>, kube_client::Error>> + Send>>;

impl tower::Service<http::Request<Body>> for RecordWrites {
    type Response = http::Response<Body>;
    type Error = kube_client::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The wrapped client waits for its own capacity in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // This runs on the buffer's task: the target is worked out here, the context is read
        // in the future below, which the caller's task polls.
        let target = Target::of(&request);
        let client = self.inner.clone();
        Box::pin(async move {
            let context = target.as_ref().and_then(|_| ReconcileContext::current());
            let (Some(target), Some(context)) = (target, context) else {
                return client.send(request).await;
            };
            // Recorded before it is sent: a write whose answer is lost (the reconcile ended
            // first, the connection dropped) may have been made, and must hold the next
            // reconcile all the same.
            let (parts, body) = request.into_parts();
            let sent = body.collect_bytes().await?;
            let request = http::Request::from_parts(parts, Body::from(sent.to_vec()));
            // A delete's options (dry run among them) travel in its body.
            if target.verb == Verb::Delete && dry_run_in(&sent) {
                return client.send(request).await;
            }
            let expected = context.record(target.expect(&sent));
            let response = client.send(request).await?;
            let status = response.status();
            if !status.is_success() {
                // A refusal made nothing, nor did a server error other than a timeout; a 504
                // (the server gave up waiting, etcd may have committed) stays expected, as
                // client-go keeps an expectation only for a timeout.
                if status != http::StatusCode::GATEWAY_TIMEOUT {
                    context.settle(&expected, None);
                }
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let bytes = body.collect_bytes().await?;
            if let Some(write) = target.write(&bytes) {
                context.settle(&expected, Some(write));
            }
            Ok(http::Response::from_parts(parts, Body::from(bytes.to_vec())))
        })
    }
}

/// What a write request addresses, from its method and path.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    verb: Verb,
    group: String,
    resource: String,
    namespace: Option<String>,
    /// The name in the path (none for a create).
    name: Option<String>,
}

impl Target {
    /// The target of a write of one object; `None` for a read, a dry run, a delete of a
    /// collection, or a path that is not a resource's.
    fn of<B>(request: &http::Request<B>) -> Option<Self> {
        let verb = match *request.method() {
            Method::POST => Verb::Create,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => return None,
        };
        let uri = request.uri();
        if uri.query().is_some_and(|q| q.split('&').any(|p| p.starts_with("dryRun="))) {
            return None;
        }
        let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        // `namespaces/{ns}/{resource}...`, or a cluster-scoped `{resource}...` (namespaces
        // themselves among them: `namespaces/{name}[/status|/finalize]`).
        let (namespace, resource, name) = match rest {
            ["namespaces", ns, resource, name @ ..]
                if !matches!(*resource, "status" | "finalize") =>
            {
                (Some((*ns).to_owned()), *resource, name.first().copied())
            }
            [resource, name @ ..] if !resource.is_empty() => {
                (None, *resource, name.first().copied())
            }
            _ => return None,
        };
        // A create names no object in its path; every other write names one.
        if (verb == Verb::Create) != name.is_none() {
            return None;
        }
        Some(Self {
            verb,
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace,
            name: name.map(str::to_owned),
        })
    }

    /// The write expected from the request's `body` before it is sent: the object named in
    /// the path, or for a create in the body (its `generateName` prefix if it has no name),
    /// with the controlling owner the body gives.
    fn expect(&self, body: &[u8]) -> Write {
        let meta = match self.verb {
            Verb::Create => serde_json::from_slice::<Answer>(body).map(|a| a.metadata).ok(),
            _ => None,
        };
        let meta = meta.unwrap_or_default();
        let generate_name = meta.generate_name.filter(|_| meta.name.is_none());
        let name = self.name.clone().or(meta.name).or(generate_name.clone()).unwrap_or_default();
        let namespace = self.namespace.clone().or(meta.namespace);
        Write {
            verb: self.verb,
            group: self.group.clone(),
            resource: self.resource.clone(),
            key: key_in(namespace.as_deref(), &name),
            resource_version: None,
            generate_name,
            labels: (self.verb == Verb::Create).then_some(meta.labels),
            owner: controller_of(meta.owner_references, namespace.as_deref()),
            answered: false,
            raised: Vec::new(),
            uid: (self.verb == Verb::Delete).then(|| precondition_uid(body)).flatten(),
        }
    }

    /// The write the server's answer `body` tells of; `None` if it is not an object.
    fn write(&self, body: &[u8]) -> Option<Write> {
        let answer: Answer = serde_json::from_slice(body).ok()?;
        let status = answer.kind.as_deref() == Some("Status");
        if status && self.verb != Verb::Delete {
            return None;
        }
        // A delete answered with a Status: the object is gone; its name is the path's, its
        // uid in the details.
        let uid = match status {
            true => answer.details.and_then(|d| d.uid),
            false => answer.metadata.uid.clone(),
        };
        let meta = if status { AnswerMeta::default() } else { answer.metadata };
        let name = meta.name.or_else(|| self.name.clone())?;
        let namespace = meta.namespace.or_else(|| self.namespace.clone());
        let key = key_in(namespace.as_deref(), &name);
        let resource_version = meta.resource_version.and_then(|rv| rv.parse().ok());
        let resource_version = match self.verb {
            // Still there (finalizers, a grace period): caught up as an update.
            Verb::Delete if meta.deletion_timestamp.is_none() => None,
            _ => Some(resource_version?),
        };
        Some(Write {
            verb: self.verb,
            group: self.group.clone(),
            resource: self.resource.clone(),
            key,
            resource_version,
            generate_name: meta.generate_name.filter(|_| self.verb == Verb::Create),
            labels: (!status).then_some(meta.labels),
            owner: controller_of(meta.owner_references, namespace.as_deref()),
            answered: true,
            raised: Vec::new(),
            uid: uid.filter(|_| self.verb == Verb::Delete),
        })
    }
}

/// The uid a delete's options body names as its precondition.
fn precondition_uid(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Options {
        preconditions: Option<Details>,
    }
    serde_json::from_slice::<Options>(body).ok()?.preconditions?.uid
}

/// Whether a delete's options body asks for a dry run (`"dryRun": ["All"]`).
fn dry_run_in(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Options {
        #[serde(default)]
        dry_run: Vec<String>,
    }
    serde_json::from_slice::<Options>(body).is_ok_and(|o| !o.dry_run.is_empty())
}

/// `name` in `namespace`, or cluster-scoped.
fn key_in(namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) => ObjectKey::namespaced(ns, name),
        None => ObjectKey::cluster(name),
    }
}

/// The controlling owner among `references`, in `namespace`.
fn controller_of(references: Vec<OwnerRef>, namespace: Option<&str>) -> Option<ObjectKey> {
    let owner = references.into_iter().find(|r| r.controller == Some(true))?;
    Some(key_in(namespace, &owner.name))
}

/// The parts of a write's answer the record needs.
#[derive(Deserialize)]
struct Answer {
    kind: Option<String>,
    #[serde(default)]
    metadata: AnswerMeta,
    /// A `Status`'s details (a delete's, with the deleted object's uid).
    #[serde(default, deserialize_with = "lenient_details")]
    details: Option<Details>,
}

/// A `Status`'s details, or nothing where the field has another shape: an object of a custom
/// kind may have a top-level `details` of its own, which must not leave its answer unread.
fn lenient_details<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Details>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Lenient {
        Details(Details),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Lenient::deserialize(d)? {
        Lenient::Details(details) => Some(details),
        Lenient::Other(_) => None,
    })
}

/// A `Status`'s details, or a delete's preconditions: the uid is all that is read.
#[derive(Deserialize)]
struct Details {
    uid: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct AnswerMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generate_name: Option<String>,
    deletion_timestamp: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    owner_references: Vec<OwnerRef>,
}

#[derive(Deserialize)]
struct OwnerRef {
    name: String,
    controller: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: Method, uri: &str) -> Option<Target> {
        Target::of(&http::Request::builder().method(method).uri(uri).body(()).unwrap())
    }

    #[test]
    fn writes_of_one_object_are_told_from_reads_dry_runs_and_collections() {
        let create = target(Method::POST, "/api/v1/namespaces/ns/configmaps?fieldManager=x");
        assert_eq!(
            create,
            Some(Target {
                verb: Verb::Create,
                group: String::new(),
                resource: "configmaps".into(),
                namespace: Some("ns".into()),
                name: None,
            })
        );
        let status = target(Method::PATCH, "/apis/apps/v1/namespaces/ns/deployments/d/status");
        assert_eq!(
            status.map(|t| (t.group, t.resource)),
            Some(("apps".into(), "deployments".into()))
        );
        let namespace = target(Method::PUT, "/api/v1/namespaces/ns/finalize").unwrap();
        assert_eq!((namespace.resource.as_str(), namespace.namespace), ("namespaces", None));
        assert!(target(Method::GET, "/api/v1/namespaces/ns/configmaps/c").is_none());
        assert!(
            target(Method::DELETE, "/api/v1/namespaces/ns/configmaps").is_none(),
            "a collection"
        );
        assert!(target(Method::POST, "/api/v1/namespaces/ns/configmaps?dryRun=All").is_none());
        assert!(target(Method::POST, "/version").is_none());
    }

    #[test]
    fn the_answer_names_the_object_its_version_and_its_owner() {
        let create = target(Method::POST, "/api/v1/namespaces/ns/configmaps").unwrap();
        let body = br#"{"kind":"ConfigMap","metadata":{"name":"child-x1","generateName":"child-",
            "namespace":"ns","resourceVersion":"42","ownerReferences":[
            {"name":"other","controller":false},{"name":"parent","controller":true}]}}"#;
        let write = create.write(body).unwrap();
        assert_eq!(write.key, ObjectKey::namespaced("ns", "child-x1"));
        assert_eq!(write.resource_version, Some(42));
        assert_eq!(write.generate_name.as_deref(), Some("child-"));
        assert_eq!(write.owner, Some(ObjectKey::namespaced("ns", "parent")));
        let delete = target(Method::DELETE, "/api/v1/namespaces/ns/configmaps/c").unwrap();
        let gone = br#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","resourceVersion":"43"}}"#;
        assert_eq!(delete.write(gone).unwrap().resource_version, None, "gone: no version");
        let delete = target(Method::DELETE, "/api/v1/namespaces/ns/configmaps/c").unwrap();
        let kept = br#"{"metadata":{"name":"c","resourceVersion":"44","deletionTimestamp":"t"}}"#;
        assert_eq!(delete.write(kept).unwrap().resource_version, Some(44), "still there");
        let delete = target(Method::DELETE, "/api/v1/namespaces/ns/configmaps/c").unwrap();
        let status = br#"{"kind":"Status","status":"Success"}"#;
        let write = delete.write(status).unwrap();
        assert_eq!((write.key, write.resource_version), (ObjectKey::namespaced("ns", "c"), None));
        // The deleted object's uid, from each answer and from the request's preconditions.
        let status = br#"{"kind":"Status","details":{"name":"c","uid":"u1"}}"#;
        assert_eq!(delete.write(status).unwrap().uid.as_deref(), Some("u1"));
        let gone = br#"{"kind":"ConfigMap","metadata":{"name":"c","uid":"u2"}}"#;
        assert_eq!(delete.write(gone).unwrap().uid.as_deref(), Some("u2"));
        let options = br#"{"preconditions":{"uid":"u3"}}"#;
        assert_eq!(delete.expect(options).uid.as_deref(), Some("u3"));
        assert_eq!(create.write(body).unwrap().uid, None, "a create's uid is not kept");
        // A custom kind's own top-level `details`, of any shape, leaves its answer readable.
        for details in [r#""text""#, r#"{"uid":5}"#, "[1]", "null"] {
            let answer = format!(
                r#"{{"kind":"Widget","details":{details},"metadata":{{"name":"w","resourceVersion":"7"}}}}"#
            );
            let write = create.write(answer.as_bytes());
            assert_eq!(write.map(|w| w.resource_version), Some(Some(7)), "details: {details}");
            let expected = create.expect(answer.as_bytes());
            assert_eq!(expected.key, ObjectKey::namespaced("ns", "w"), "details: {details}");
        }
    }

    /// A server that commits every create and answers by namespace: never (`lost`), with a
    /// refusal (`refused`), or with a 504 after the commit (`late`).
    fn server() -> Client {
        let service = tower::service_fn(|request: http::Request<Body>| async move {
            let status = match request.uri().path().split('/').nth(4) {
                Some("lost") => futures::future::pending().await,
                Some("refused") => http::StatusCode::CONFLICT,
                Some("failed") => http::StatusCode::INTERNAL_SERVER_ERROR,
                _ => http::StatusCode::GATEWAY_TIMEOUT,
            };
            let answer = br#"{"kind":"Status","status":"Failure"}"#.to_vec();
            let response = http::Response::builder().status(status).body(Body::from(answer));
            Ok::<_, std::convert::Infallible>(response.expect("a valid response"))
        });
        Client::new(service, "default")
    }

    fn create(client: &Client, namespace: &str) -> impl Future<Output = bool> + use<> {
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"child-",
            "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"parent",
            "uid":"u","controller":true}]}}"#;
        let request = http::Request::post(format!("/api/v1/namespaces/{namespace}/configmaps"))
            .body(Body::from(body.to_vec()))
            .expect("a valid request");
        let client = client.clone();
        async move { client.send(request).await.is_ok() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_is_expected_before_it_is_sent_and_only_a_refusal_withdraws_it() {
        let client = recording_client(server());
        let context = ReconcileContext::new("c", ObjectKey::cluster("p"), Default::default(), None);
        ReconcileContext::scope(context.clone(), async {
            let lost =
                tokio::time::timeout(std::time::Duration::from_secs(1), create(&client, "lost"));
            assert!(lost.await.is_err(), "the answer never comes: the reconcile moves on");
            assert!(create(&client, "refused").await, "a 409 is an answer");
            assert!(create(&client, "failed").await, "a 500 is an answer");
            assert!(create(&client, "late").await, "a 504 is an answer");
            let dry_run = http::Request::delete("/api/v1/namespaces/late/configmaps/c")
                .body(Body::from(br#"{"dryRun":["All"]}"#.to_vec()))
                .expect("a valid request");
            assert!(client.send(dry_run).await.is_ok(), "a dry-run delete, with its 504");
            let context = ReconcileContext::current().expect("in the reconcile");
            let unscoped = tokio::spawn(create(&client, "spawned"));
            assert!(unscoped.await.expect("the task ran"), "a task of its own, unrecorded");
            let spawned = tokio::spawn(ReconcileContext::scope(context, create(&client, "late")));
            assert!(spawned.await.expect("the task ran"), "a task in the reconcile's scope");
        })
        .await;
        let expected = |namespace: &str| Write {
            verb: Verb::Create,
            group: String::new(),
            resource: "configmaps".into(),
            key: ObjectKey::namespaced(namespace, "child-"),
            resource_version: None,
            generate_name: Some("child-".into()),
            labels: Some(BTreeMap::new()),
            owner: Some(ObjectKey::namespaced(namespace, "parent")),
            answered: false,
            raised: Vec::new(),
            uid: None,
        };
        assert_eq!(
            context.writes(),
            vec![expected("lost"), expected("late"), expected("late")],
            "a create whose answer was lost, and one a 504 followed, still hold the next \
             reconcile, the one a task in the reconcile's scope made too; the refused one, the \
             failed one, the dry run and the one from a task out of its scope do not"
        );
    }
}
