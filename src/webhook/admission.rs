//! Validators, defaulters and raw handlers, and [`review`]: one `AdmissionReview` body in, the
//! answer's status and body out; see the module docs.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;
use futures::FutureExt;
use futures::future::BoxFuture;
use kube_client::core::{DynamicObject, Resource, Status};
use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::panic::panic_message;

/// The largest request body taken, 7 MiB (controller-runtime's limit: an object and its old
/// version, each up to etcd's 1.5 MiB, and the review around them).
pub const MAX_REVIEW_BYTES: usize = 7 * 1024 * 1024;

/// What a validator says: allowed, with warnings for the client (often none), or denied.
pub type Validation = Result<Vec<String>, Denial>;

/// A denied request: the message the client sees, the `Status` reason and code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// What the client is told (kubectl prints it after the webhook's name).
    pub message: String,
    /// The `Status` reason: `Forbidden`, `Invalid`, …
    pub reason: String,
    /// The HTTP status the API server answers the client with.
    pub code: StatusCode,
    /// Not a decision but a webhook that cannot answer now (set by [`Denial::unavailable`]):
    /// answered with an HTTP `503`, a failed call. `false` for every denial, whatever its
    /// `code`: a denial with code 503 is still a denial.
    pub cannot_answer: bool,
}

impl Denial {
    /// Denied as forbidden (403), as controller-runtime's `admission.Denied`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            reason: "Forbidden".to_owned(),
            code: StatusCode::FORBIDDEN,
            cannot_answer: false,
        }
    }

    /// Not a decision: the webhook cannot answer now (a cache it reads has not synced). The
    /// request is answered with an HTTP `503`, a failed call, so that the webhook
    /// configuration's `failurePolicy` decides: `Fail` refuses the write, `Ignore` lets it
    /// through. Only its `cannot_answer` marks a failed call: a denial built by hand with
    /// code 503, or a raw handler's, stays a denial.
    /// Counted in [`WebhookStats::unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            reason: "ServiceUnavailable".to_owned(),
            code: StatusCode::SERVICE_UNAVAILABLE,
            cannot_answer: true,
        }
    }

    /// Denied as invalid (422), for an object whose fields are wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            reason: "Invalid".to_owned(),
            code: StatusCode::UNPROCESSABLE_ENTITY,
            cannot_answer: false,
        }
    }
}

/// A cache that has not synced in time: [`Denial::unavailable`], so that `?` on
/// [`Informer::synced_indexer`](crate::cache::Informer::synced_indexer) in a validator
/// leaves the answer to the `failurePolicy`.
impl From<crate::cache::CacheSyncError> for Denial {
    fn from(err: crate::cache::CacheSyncError) -> Self {
        Self::unavailable(format!("the webhook cannot answer yet: {err}"))
    }
}

/// Validates the objects of kind `K` (controller-runtime's `CustomValidator`). Each method
/// gets the whole request too: its `dry_run`, `user_info`, `sub_resource`. The defaults allow.
#[async_trait::async_trait]
pub trait Validator<K: Resource + Send + Sync>: Send + Sync {
    /// A create of `object`.
    async fn validate_create(&self, object: &K, request: &AdmissionRequest<K>) -> Validation {
        let _ = (object, request);
        Ok(Vec::new())
    }

    /// An update from `old` to `new`.
    async fn validate_update(&self, old: &K, new: &K, request: &AdmissionRequest<K>) -> Validation {
        let _ = (old, new, request);
        Ok(Vec::new())
    }

    /// A delete of `old`.
    async fn validate_delete(&self, old: &K, request: &AdmissionRequest<K>) -> Validation {
        let _ = (old, request);
        Ok(Vec::new())
    }
}

/// Sets defaults on the objects of kind `K` as they are created or updated
/// (controller-runtime's `CustomDefaulter`): change `object` in place.
#[async_trait::async_trait]
pub trait Defaulter<K: Resource + Send + Sync>: Send + Sync {
    /// Sets what `object` leaves unset.
    async fn default(&self, object: &mut K, request: &AdmissionRequest<K>);
}

/// Answers a request whole: for what a validator or a defaulter does not cover.
#[async_trait::async_trait]
pub trait AdmissionHandler: Send + Sync {
    /// The response to `request` (start from `AdmissionResponse::from(&request)`, which
    /// allows it and carries its uid).
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse;
}

/// What answers a webhook's requests.
pub enum Review<'a, K: Resource + Send + Sync> {
    /// A validating webhook.
    Validate(&'a dyn Validator<K>),
    /// A mutating webhook that sets defaults.
    Default(&'a dyn Defaulter<K>),
    /// A webhook answered by a raw handler (`K` unused).
    Handle(&'a dyn AdmissionHandler),
}

/// The answer to one request: its HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// 200 with an `AdmissionReview` (allowed or denied), 400 for a body that is not one,
    /// 413 for one larger than [`MAX_REVIEW_BYTES`], or 503 for a webhook that cannot answer yet
    /// ([`Denial::unavailable`]; a denial with code 503 is a 200 review like any denial).
    pub status: StatusCode,
    /// The `AdmissionReview` answer, or a `Status` naming what is wrong with the body.
    pub body: Vec<u8>,
}

/// Counts of what a webhook answered, for logs and metrics.
#[derive(Debug, Default)]
pub struct WebhookStats {
    reviewed: AtomicU64,
    denied: AtomicU64,
    malformed: AtomicU64,
    panicked: AtomicU64,
    unavailable: AtomicU64,
}

impl WebhookStats {
    /// Requests answered with a review (allowed or denied).
    pub fn reviewed(&self) -> u64 {
        self.reviewed.load(Ordering::Relaxed)
    }

    /// Of those, denied (a panic's denial included).
    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// Bodies refused: a 400 (not a review) or a 413 (too large).
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Validators, defaulters or handlers that panicked (each answered with a denial).
    pub fn panicked(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// Requests answered with a `503` because the webhook could not answer
    /// ([`Denial::unavailable`]): failed calls, left to the `failurePolicy`, not reviews.
    pub fn unavailable(&self) -> u64 {
        self.unavailable.load(Ordering::Relaxed)
    }
}

/// Answers one request body; see the module docs. Never panics, whatever the body.
pub async fn review<K>(what: Review<'_, K>, body: &[u8], stats: &WebhookStats) -> Reply
where
    K: Resource + DeserializeOwned + Serialize + Clone + Send + Sync,
{
    if let Err(refused) = check_size(body, stats) {
        return refused;
    }
    let outcome = async {
        match what {
            Review::Handle(handler) => {
                let request = parse::<DynamicObject>(body)?;
                run(handler.handle(request.clone()).map(decided), &request).await
            }
            Review::Validate(validator) => validate(validator, &parse::<K>(body)?).await,
            Review::Default(defaulter) => default(defaulter, &parse::<K>(body)?).await,
        }
    }
    .await;
    match outcome {
        // Not a decision: a failed call, for the `failurePolicy` to decide.
        Ok(Answer { response, cannot_answer: true, .. }) => {
            stats.unavailable.fetch_add(1, Ordering::Relaxed);
            let status = response.result;
            tracing::warn!(message = %status.message, "a webhook cannot answer yet; answering 503");
            let body = serde_json::to_vec(&status).unwrap_or_default();
            Reply { status: StatusCode::SERVICE_UNAVAILABLE, body }
        }
        Ok(Answer { response, panicked, .. }) => {
            stats.reviewed.fetch_add(1, Ordering::Relaxed);
            if !response.allowed {
                stats.denied.fetch_add(1, Ordering::Relaxed);
            }
            if panicked {
                stats.panicked.fetch_add(1, Ordering::Relaxed);
            }
            let body = serde_json::to_vec(&response.into_review()).unwrap_or_default();
            Reply { status: StatusCode::OK, body }
        }
        Err(why) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%why, "refused a webhook request");
            bad_request(&why)
        }
    }
}

/// A webhook's answer to one request.
struct Answer {
    response: AdmissionResponse,
    /// The webhook panicked; `response` denies saying so.
    panicked: bool,
    /// A [`Denial::unavailable`]: answered as a failed call, not with `response`.
    cannot_answer: bool,
}

/// A response that is a decision (never [`Denial::unavailable`]'s): a raw handler's or a
/// defaulter's.
fn decided(response: AdmissionResponse) -> (AdmissionResponse, bool) {
    (response, false)
}

/// A 400 answer with a `Status` saying `why` (admission and conversion bodies alike).
pub(super) fn bad_request(why: &str) -> Reply {
    let status = Status::failure(why, "BadRequest").with_code(400);
    Reply { status: StatusCode::BAD_REQUEST, body: serde_json::to_vec(&status).unwrap_or_default() }
}

/// The answer to a body larger than [`MAX_REVIEW_BYTES`], whichever part of the server met
/// it: a 413 with a `Status` in controller-runtime's words (`request entity is too large;
/// limit is 7340032 bytes`) and kube-apiserver's reason (`RequestEntityTooLarge`).
pub(super) fn too_large() -> Reply {
    // Whole, as kube-apiserver writes a `Status` (kube-core's type leaves out its kind).
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("request entity is too large; limit is {MAX_REVIEW_BYTES} bytes"),
        "reason": "RequestEntityTooLarge",
        "code": 413,
    });
    Reply { status: StatusCode::PAYLOAD_TOO_LARGE, body: status.to_string().into_bytes() }
}

/// [`too_large`], counted and logged.
pub(super) fn refuse_too_large(stats: &WebhookStats) -> Reply {
    stats.malformed.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(limit = MAX_REVIEW_BYTES, "refused a webhook request: its body is too large");
    too_large()
}

/// Refuses a body larger than [`MAX_REVIEW_BYTES`] before it is parsed.
fn check_size(body: &[u8], stats: &WebhookStats) -> Result<(), Reply> {
    match body.len() > MAX_REVIEW_BYTES {
        true => Err(refuse_too_large(stats)),
        false => Ok(()),
    }
}

/// The request of an `AdmissionReview` body, or what is wrong with it.
fn parse<K: Resource + DeserializeOwned>(body: &[u8]) -> Result<AdmissionRequest<K>, String> {
    let review: AdmissionReview<K> = serde_json::from_slice(body)
        .map_err(|err| format!("the request body is not an AdmissionReview: {err}"))?;
    if review.types.kind != "AdmissionReview" {
        return Err(format!(
            "the request body is a {:?}, not an AdmissionReview",
            review.types.kind
        ));
    }
    // The conversion carries the review's apiVersion and kind into the request, whence
    // the response takes them.
    review.try_into().map_err(|_| "the AdmissionReview has no request".to_owned())
}

/// Runs `answer` (a response and whether the webhook cannot answer), a panic in it a
/// denial saying so.
async fn run<T: Resource>(
    answer: impl Future<Output = (AdmissionResponse, bool)>,
    request: &AdmissionRequest<T>,
) -> Result<Answer, String> {
    match AssertUnwindSafe(answer).catch_unwind().await {
        Ok((response, cannot_answer)) => Ok(Answer { response, panicked: false, cannot_answer }),
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(panic = %message, uid = %request.uid, "a webhook panicked");
            let response = AdmissionResponse::from(request)
                .deny(format!("the webhook failed: it panicked: {message}"));
            Ok(Answer { response, panicked: true, cannot_answer: false })
        }
    }
}

/// An operation as the API server writes it.
fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// The object a create or update carries, or what is missing.
fn object_of<K: Resource>(request: &AdmissionRequest<K>) -> Result<&K, String> {
    request.object.as_ref().ok_or_else(|| {
        format!("a {} request without an object", operation_name(&request.operation))
    })
}

/// The old object an update or delete carries, or what is missing.
fn old_object_of<K: Resource>(request: &AdmissionRequest<K>) -> Result<&K, String> {
    request.old_object.as_ref().ok_or_else(|| {
        format!("a {} request without an old object", operation_name(&request.operation))
    })
}

async fn validate<K: Resource + Send + Sync>(
    validator: &dyn Validator<K>,
    request: &AdmissionRequest<K>,
) -> Result<Answer, String> {
    let validation: BoxFuture<'_, Validation> = match request.operation {
        Operation::Create => validator.validate_create(object_of(request)?, request),
        Operation::Update => {
            validator.validate_update(old_object_of(request)?, object_of(request)?, request)
        }
        Operation::Delete => validator.validate_delete(old_object_of(request)?, request),
        // Validators do not see connects (to a pod's exec, say): allowed.
        Operation::Connect => Box::pin(async { Ok(Vec::new()) }),
    };
    run(async { respond(request, validation.await) }, request).await
}

/// The response for a validation: allowed with its warnings, or denied as it says; and
/// whether it is a [`Denial::unavailable`].
fn respond<K: Resource>(
    request: &AdmissionRequest<K>,
    validation: Validation,
) -> (AdmissionResponse, bool) {
    let mut response = AdmissionResponse::from(request);
    match validation {
        Ok(warnings) => {
            response.warnings = Some(warnings).filter(|w| !w.is_empty());
            (response, false)
        }
        Err(denial) => {
            response.allowed = false;
            response.result =
                Status::failure(&denial.message, &denial.reason).with_code(denial.code.as_u16());
            (response, denial.cannot_answer)
        }
    }
}

async fn default<K: Resource + Serialize + Clone + Send + Sync>(
    defaulter: &dyn Defaulter<K>,
    request: &AdmissionRequest<K>,
) -> Result<Answer, String> {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        let response = AdmissionResponse::from(request);
        return Ok(Answer { response, panicked: false, cannot_answer: false });
    }
    let received = object_of(request)?.clone();
    let before = serde_json::to_value(&received).map_err(|e| format!("the object: {e}"))?;
    let answer = async {
        let mut object = received;
        defaulter.default(&mut object, request).await;
        let response = AdmissionResponse::from(request);
        let after = match serde_json::to_value(&object) {
            Ok(after) => after,
            Err(err) => {
                return response.deny(format!("the defaulted object does not encode: {err}"));
            }
        };
        let patch = json_patch::diff(&before, &after);
        if patch.0.is_empty() {
            return response;
        }
        match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(err) => response.deny(format!("the patch does not encode: {err}")),
        }
    };
    run(answer.map(decided), request).await
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn body(operation: &str, object: Option<Value>, old: Option<Value>, dry_run: bool) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
                "kind": { "group": "", "version": "v1", "kind": "ConfigMap" },
                "resource": { "group": "", "version": "v1", "resource": "configmaps" },
                "name": "greetings",
                "namespace": "default",
                "operation": operation,
                "userInfo": { "username": "alice" },
                "object": object,
                "oldObject": old,
                "dryRun": dry_run,
            },
        }))
        .unwrap()
    }

    fn configmap(data: Value) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "greetings" }, "data": data })
    }

    fn response(reply: &Reply) -> Value {
        assert_eq!(reply.status, StatusCode::OK, "{}", String::from_utf8_lossy(&reply.body));
        let review: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(review["kind"], "AdmissionReview");
        review["response"].clone()
    }

    /// Reads the cache of an informer nobody runs, waiting up to a second for its sync.
    struct ReadsAnUnsyncedCache(crate::cache::Informer<ConfigMap>);

    #[async_trait::async_trait]
    impl Validator<ConfigMap> for ReadsAnUnsyncedCache {
        async fn validate_create(
            &self,
            _: &ConfigMap,
            _: &AdmissionRequest<ConfigMap>,
        ) -> Validation {
            let cache = self.0.synced_indexer(std::time::Duration::from_secs(1)).await?;
            Ok(vec![format!("{} objects", cache.len())])
        }
    }

    /// A validator whose cache has not synced waits its bound, then answers 503: a failed
    /// call, which the configuration's `failurePolicy` decides, not a denial.
    #[tokio::test(start_paused = true)]
    async fn a_validator_whose_cache_has_not_synced_answers_503_after_its_bound() {
        let config = kube_client::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube_client::Client::try_from(config).unwrap();
        let api: kube_client::Api<ConfigMap> = kube_client::Api::namespaced(client, "default");
        let validator = ReadsAnUnsyncedCache(crate::cache::Informer::new(api.into()));
        let stats = WebhookStats::default();
        let started = tokio::time::Instant::now();
        let created = body("CREATE", Some(configmap(json!({}))), None, false);
        let reply = review::<ConfigMap>(Review::Validate(&validator), &created, &stats).await;
        assert_eq!(started.elapsed(), std::time::Duration::from_secs(1), "waited its bound");
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        let status: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert_eq!(status["code"], 503);
        let message = status["message"].as_str().unwrap();
        assert!(
            message
                .contains("the cache of configmaps in namespace default has not synced within 1s"),
            "{message}"
        );
        assert_eq!((stats.reviewed(), stats.denied()), (0, 0), "not a review's answer");
        assert_eq!(stats.unavailable(), 1, "counted as unavailable");
    }

    /// Allows at most three keys, warns about a key named `legacy`, and records `dry_run`.
    #[derive(Default)]
    struct AtMostThree {
        dry_runs: Mutex<Vec<bool>>,
    }

    #[async_trait::async_trait]
    impl Validator<ConfigMap> for AtMostThree {
        async fn validate_create(
            &self,
            object: &ConfigMap,
            request: &AdmissionRequest<ConfigMap>,
        ) -> Validation {
            self.dry_runs.lock().push(request.dry_run);
            let data = object.data.clone().unwrap_or_default();
            if data.len() > 3 {
                return Err(Denial::invalid(format!("at most 3 keys, not {}", data.len())));
            }
            Ok(data
                .contains_key("legacy")
                .then(|| "the key legacy is going away".to_owned())
                .into_iter()
                .collect())
        }

        async fn validate_update(
            &self,
            old: &ConfigMap,
            new: &ConfigMap,
            _: &AdmissionRequest<ConfigMap>,
        ) -> Validation {
            match old.data == new.data {
                true => Ok(Vec::new()),
                false => Err(Denial::forbidden("the data is immutable")),
            }
        }
    }

    #[tokio::test]
    async fn a_validator_allows_warns_and_denies_with_its_message_reason_and_code() {
        let (validator, stats) = (AtMostThree::default(), WebhookStats::default());
        let review_of = |body: Vec<u8>| {
            let validator = &validator;
            let stats = &stats;
            async move { review::<ConfigMap>(Review::Validate(validator), &body, stats).await }
        };
        let allowed = response(
            &review_of(body("CREATE", Some(configmap(json!({"a": "1"}))), None, false)).await,
        );
        assert_eq!(allowed["allowed"], true);
        assert_eq!(allowed["uid"], "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4", "the uid is echoed");
        assert!(allowed.get("warnings").is_none());
        let warned = response(
            &review_of(body("CREATE", Some(configmap(json!({"legacy": "1"}))), None, true)).await,
        );
        assert_eq!(warned["allowed"], true);
        assert_eq!(warned["warnings"], json!(["the key legacy is going away"]));
        let four = json!({"a": "1", "b": "2", "c": "3", "d": "4"});
        let denied = response(&review_of(body("CREATE", Some(configmap(four)), None, false)).await);
        assert_eq!(denied["allowed"], false);
        assert_eq!(denied["status"]["message"], "at most 3 keys, not 4");
        assert_eq!(denied["status"]["reason"], "Invalid");
        assert_eq!(denied["status"]["code"], 422);
        let update = body(
            "UPDATE",
            Some(configmap(json!({"a": "2"}))),
            Some(configmap(json!({"a": "1"}))),
            false,
        );
        let refused = response(&review_of(update).await);
        assert_eq!(
            (refused["allowed"].clone(), refused["status"]["code"].clone()),
            (json!(false), json!(403))
        );
        // A delete is allowed by the default method; a dry run reaches the validator as one.
        let delete =
            response(&review_of(body("DELETE", None, Some(configmap(json!({}))), false)).await);
        assert_eq!(delete["allowed"], true);
        assert_eq!(*validator.dry_runs.lock(), [false, true, false]);
        assert_eq!((stats.reviewed(), stats.denied(), stats.malformed()), (5, 2, 0));
    }

    /// Sets `data.replicas` to "1" when it is missing.
    struct DefaultReplicas;

    #[async_trait::async_trait]
    impl Defaulter<ConfigMap> for DefaultReplicas {
        async fn default(&self, object: &mut ConfigMap, _: &AdmissionRequest<ConfigMap>) {
            object
                .data
                .get_or_insert_default()
                .entry("replicas".to_owned())
                .or_insert_with(|| "1".to_owned());
        }
    }

    #[tokio::test]
    async fn a_defaulter_answers_with_the_patch_of_what_it_changed() {
        let stats = WebhookStats::default();
        let original = configmap(json!({"greeting": "hello"}));
        let reply = review::<ConfigMap>(
            Review::Default(&DefaultReplicas),
            &body("CREATE", Some(original.clone()), None, false),
            &stats,
        )
        .await;
        let answer = response(&reply);
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["patchType"], "JSONPatch");
        // kube-core writes the patch's bytes as a JSON array of numbers, which the API
        // server's decoder takes for a `[]byte` as it takes base64.
        let patch_bytes: Vec<u8> = serde_json::from_value(answer["patch"].clone()).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch_bytes).unwrap();
        let mut patched = original.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched["data"], json!({"greeting": "hello", "replicas": "1"}));
        assert_eq!(patch.0.len(), 1, "only what it changed: {patch:?}");
        // Nothing to set: no patch at all.
        let already = configmap(json!({"replicas": "3"}));
        let answer = response(
            &review::<ConfigMap>(
                Review::Default(&DefaultReplicas),
                &body("UPDATE", Some(already.clone()), Some(already), false),
                &stats,
            )
            .await,
        );
        assert!(answer.get("patch").is_none(), "{answer}");
    }

    struct Panics;

    #[async_trait::async_trait]
    impl Validator<ConfigMap> for Panics {
        async fn validate_create(
            &self,
            _: &ConfigMap,
            _: &AdmissionRequest<ConfigMap>,
        ) -> Validation {
            panic!("no validation today")
        }
    }

    #[tokio::test]
    async fn a_panicking_validator_is_a_counted_denial_not_a_dead_server() {
        let stats = WebhookStats::default();
        let reply = review::<ConfigMap>(
            Review::Validate(&Panics),
            &body("CREATE", Some(configmap(json!({}))), None, false),
            &stats,
        )
        .await;
        let answer = response(&reply);
        assert_eq!(answer["allowed"], false);
        let message = answer["status"]["message"].as_str().unwrap();
        assert!(message.contains("panicked: no validation today"), "{message}");
        assert_eq!((stats.panicked(), stats.denied()), (1, 1));
    }

    /// Denies with a 503 of its own making: a decision, not [`Denial::unavailable`].
    struct DeniesWith503;

    #[async_trait::async_trait]
    impl Validator<ConfigMap> for DeniesWith503 {
        async fn validate_create(
            &self,
            _: &ConfigMap,
            _: &AdmissionRequest<ConfigMap>,
        ) -> Validation {
            Err(Denial {
                message: "closed for maintenance".to_owned(),
                reason: "ServiceUnavailable".to_owned(),
                code: StatusCode::SERVICE_UNAVAILABLE,
                cannot_answer: false,
            })
        }
    }

    #[async_trait::async_trait]
    impl AdmissionHandler for DeniesWith503 {
        async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
            let mut response = AdmissionResponse::from(&request).deny("closed for maintenance");
            response.result.code = 503;
            response
        }
    }

    /// A denial with code 503, hand-built or a raw handler's, stays a denial (a 200 review
    /// with `allowed: false`): only [`Denial::unavailable`] is a failed call, which a
    /// `failurePolicy: Ignore` would let through.
    #[tokio::test]
    async fn a_hand_built_503_denial_is_still_a_denial() {
        let stats = WebhookStats::default();
        let created = body("CREATE", Some(configmap(json!({}))), None, false);
        let validated = review::<ConfigMap>(Review::Validate(&DeniesWith503), &created, &stats);
        let handled = review::<ConfigMap>(Review::Handle(&DeniesWith503), &created, &stats);
        for reply in [validated.await, handled.await] {
            let answer = response(&reply);
            assert_eq!(answer["allowed"], false);
            assert_eq!(answer["status"]["code"], 503);
            assert_eq!(answer["status"]["message"], "closed for maintenance");
        }
        assert_eq!((stats.reviewed(), stats.denied(), stats.unavailable()), (2, 2, 0));
    }

    struct LabelsOnly;

    #[async_trait::async_trait]
    impl AdmissionHandler for LabelsOnly {
        async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
            let labelled = request.object.as_ref().is_some_and(|o| o.metadata.labels.is_some());
            let response = AdmissionResponse::from(&request);
            if labelled { response } else { response.deny("label it") }
        }
    }

    #[tokio::test]
    async fn a_raw_handler_answers_any_kind() {
        let stats = WebhookStats::default();
        let reply = review::<ConfigMap>(
            Review::Handle(&LabelsOnly),
            &body("CREATE", Some(configmap(json!({}))), None, false),
            &stats,
        )
        .await;
        assert_eq!(response(&reply)["status"]["message"], "label it");
    }

    fn refusal(reply: &Reply) -> String {
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let status: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(
            (status["code"].clone(), status["reason"].clone()),
            (json!(400), json!("BadRequest"))
        );
        status["message"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn bodies_that_are_not_reviews_are_400s_naming_the_problem() {
        let stats = WebhookStats::default();
        let validator = AtMostThree::default();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json".to_vec(), "not an AdmissionReview"),
            (br#"{"apiVersion":"v1","kind":"ConfigMap"}"#.to_vec(), "not an AdmissionReview"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
                "has no request",
            ),
            (body("CREATE", None, None, false), "CREATE request without an object"),
            (body("UPDATE", Some(configmap(json!({}))), None, false), "without an old object"),
        ];
        for (bytes, want) in cases {
            let message =
                refusal(&review::<ConfigMap>(Review::Validate(&validator), &bytes, &stats).await);
            assert!(message.contains(want), "{message:?} should say {want:?}");
        }
        assert_eq!(stats.malformed(), 5);
        assert_eq!(stats.reviewed(), 0);
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_a_413_in_controller_runtimes_words() {
        let stats = WebhookStats::default();
        let validator = AtMostThree::default();
        let at_limit = vec![b' '; MAX_REVIEW_BYTES];
        let reply = review::<ConfigMap>(Review::Validate(&validator), &at_limit, &stats).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "7 MiB is parsed (and is no review)");
        for n in [MAX_REVIEW_BYTES + 1, MAX_REVIEW_BYTES + 2, 2 * MAX_REVIEW_BYTES] {
            let reply =
                review::<ConfigMap>(Review::Validate(&validator), &vec![b' '; n], &stats).await;
            assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE, "{n} bytes");
            let status: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["code"], 413);
            assert_eq!(status["reason"], "RequestEntityTooLarge");
            assert_eq!(status["message"], "request entity is too large; limit is 7340032 bytes");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Whatever the body (bytes at random, or a valid review with a byte changed or cut
        /// short), the answer is a review or a 400 with a message: never a panic.
        #[test]
        fn malformed_bodies_are_always_answered(
            noise in prop::collection::vec(any::<u8>(), 0..512),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut changed = body("CREATE", Some(configmap(json!({"a": "1"}))), None, false);
            let i = at.index(changed.len());
            changed[i] = byte;
            let short = body("UPDATE", Some(configmap(json!({}))), Some(configmap(json!({}))), false);
            let short = short[..cut.index(short.len())].to_vec();
            let stats = WebhookStats::default();
            let validator = AtMostThree::default();
            for bytes in [noise, changed, short] {
                let reply = runtime.block_on(review::<ConfigMap>(Review::Validate(&validator), &bytes, &stats));
                prop_assert!(reply.status == StatusCode::OK || reply.status == StatusCode::BAD_REQUEST);
                let answer: Value = serde_json::from_slice(&reply.body).unwrap();
                if reply.status == StatusCode::BAD_REQUEST {
                    prop_assert!(!answer["message"].as_str().unwrap_or_default().is_empty());
                } else {
                    prop_assert_eq!(&answer["kind"], "AdmissionReview");
                }
            }
        }
    }
}
