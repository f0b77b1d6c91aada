//! [`Conversion`]: a CRD's conversion webhook, hub and spokes (controller-runtime's
//! `conversion.Hub` / `Convertible`), answered from the `ConversionReview` bodies the API
//! server sends.
//!
//! Contract:
//! - One version is the **hub**; every other served version is a **spoke** that converts to
//!   the hub and back with `TryFrom` (a `From` is a `TryFrom` that cannot fail). An object is
//!   converted spoke → hub → spoke; one already in the desired version is sent back as is.
//! - **Metadata is kept as received**: the API server refuses a conversion that changes
//!   anything in `metadata` but labels and annotations, so those two are taken from the
//!   converted object (when it sets them) and the rest from the one received.
//! - **Lists keep their order**: the objects come back in the order they came.
//! - **Failures name the object**: a version neither hub nor spoke, an object that does not
//!   decode, or a conversion that fails (or panics) is a [`ConversionError`] naming the object
//!   (`namespace/name`) and the versions, answered as `Failed` with its message; the API
//!   server passes it to the client. A body that is not a `ConversionReview` is a 400 naming
//!   the problem.
//! - **Building cannot panic**: a spoke whose version is the hub's or another spoke's is a
//!   [`ConversionError::Duplicate`].

use std::collections::BTreeMap;
use std::fmt::Display;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;

use kube_client::core::{Resource, Status};
use kube_core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use axum::http::StatusCode;

use super::admission::{bad_request, too_large};
use super::{MAX_REVIEW_BYTES, Reply};
use crate::panic::panic_message;

/// One version's way to the hub and back, on JSON objects: why not, if it fails.
#[derive(Clone, Copy)]
struct Spoke {
    to_hub: fn(Value) -> Result<Value, String>,
    from_hub: fn(Value) -> Result<Value, String>,
}

/// Why a [`Conversion`] could not be built, or could not convert an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConversionError {
    /// A spoke was added for a version the conversion has already (the hub's, or another
    /// spoke's).
    #[error("{version} is in the conversion twice")]
    Duplicate {
        /// The apiVersion.
        version: String,
    },
    /// The object's version, or the one asked for, is neither the hub nor a spoke.
    #[error(
        "converting {object} from {from} to {to}: {version:?} is not a version of this \
         conversion ({})",
        known.join(", ")
    )]
    UnknownVersion {
        /// The object, `namespace/name`.
        object: String,
        /// Its apiVersion.
        from: String,
        /// The apiVersion asked for.
        to: String,
        /// The version not known.
        version: String,
        /// The versions the conversion knows.
        known: Vec<String>,
    },
    /// The object did not decode as its version's type, its `TryFrom` failed, or the result
    /// did not encode.
    #[error("converting {object} from {from} to {to}: {reason}")]
    Failed {
        /// The object, `namespace/name`.
        object: String,
        /// Its apiVersion.
        from: String,
        /// The apiVersion asked for.
        to: String,
        /// Why: the `TryFrom` error's message, or the decoding error.
        reason: String,
    },
    /// The conversion panicked (a bug in a `TryFrom`).
    #[error("converting {object} to {to}: the conversion panicked: {message}")]
    Panicked {
        /// The object, `namespace/name`.
        object: String,
        /// The apiVersion asked for.
        to: String,
        /// The panic's message.
        message: String,
    },
}

/// A CRD's conversion webhook: the hub `H` and its spokes. Cheap to clone.
///
/// ```
/// use ctrlkit::webhook::Conversion;
/// use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
///
/// /// v1, the hub: `spec.replicas`.
/// #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// #[kube(group = "example.com", version = "v1", kind = "Set", namespaced)]
/// pub struct SetSpec { replicas: i32 }
///
/// mod v2 {
///     # use kube::CustomResource;
///     # use schemars::JsonSchema;
///     # use serde::{Deserialize, Serialize};
///     /// v2: `spec.size`.
///     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
///     #[kube(group = "example.com", version = "v2", kind = "Set", namespaced)]
///     pub struct SetSpec { pub size: i32 }
/// }
///
/// impl From<v2::Set> for Set {
///     fn from(s: v2::Set) -> Self {
///         Set { metadata: s.metadata, spec: SetSpec { replicas: s.spec.size } }
///     }
/// }
/// impl From<Set> for v2::Set {
///     fn from(s: Set) -> Self {
///         v2::Set { metadata: s.metadata, spec: v2::SetSpec { size: s.spec.replicas } }
///     }
/// }
///
/// # fn main() {
/// let conversion = Conversion::<Set>::new().spoke::<v2::Set>().unwrap();
/// let v1 = serde_json::json!({
///     "apiVersion": "example.com/v1", "kind": "Set",
///     "metadata": { "name": "a" }, "spec": { "replicas": 3 },
/// });
/// let v2 = conversion.convert(v1, "example.com/v2").unwrap();
/// assert_eq!(v2["spec"], serde_json::json!({ "size": 3 }));
/// # }
/// ```
pub struct Conversion<H> {
    hub_api_version: String,
    /// By apiVersion; the hub's own entry passes objects through.
    spokes: BTreeMap<String, Spoke>,
    hub: PhantomData<fn() -> H>,
}

impl<H> Clone for Conversion<H> {
    fn clone(&self) -> Self {
        Self {
            hub_api_version: self.hub_api_version.clone(),
            spokes: self.spokes.clone(),
            hub: PhantomData,
        }
    }
}

impl<H> std::fmt::Debug for Conversion<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversion")
            .field("hub", &self.hub_api_version)
            .field("versions", &self.spokes.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// `value` decoded as `A`, converted to `B` with `TryFrom`, encoded.
fn through<A, B>(value: Value) -> Result<Value, String>
where
    A: DeserializeOwned,
    B: TryFrom<A, Error: Display> + Serialize,
{
    let from: A =
        serde_json::from_value(value).map_err(|err| format!("it does not decode: {err}"))?;
    let to = B::try_from(from).map_err(|err| err.to_string())?;
    serde_json::to_value(to).map_err(|err| format!("the converted object does not encode: {err}"))
}

impl<H> Default for Conversion<H>
where
    H: Resource<DynamicType = ()> + DeserializeOwned + Serialize + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<H> Conversion<H>
where
    H: Resource<DynamicType = ()> + DeserializeOwned + Serialize + 'static,
{
    /// A conversion whose hub is `H` (its `apiVersion` is the hub version), with no spoke yet.
    pub fn new() -> Self {
        let hub_api_version = H::api_version(&()).into_owned();
        let identity = Spoke { to_hub: Ok, from_hub: Ok };
        Self {
            spokes: BTreeMap::from([(hub_api_version.clone(), identity)]),
            hub_api_version,
            hub: PhantomData,
        }
    }

    /// Adds the spoke `S`, converted to the hub and back with `TryFrom`; an error if `S`'s
    /// apiVersion is the hub's or another spoke's.
    pub fn spoke<S>(mut self) -> Result<Self, ConversionError>
    where
        S: Resource<DynamicType = ()> + DeserializeOwned + Serialize + 'static,
        S: TryFrom<H, Error: Display>,
        H: TryFrom<S, Error: Display>,
    {
        let api_version = S::api_version(&()).into_owned();
        let spoke = Spoke { to_hub: through::<S, H>, from_hub: through::<H, S> };
        match self.spokes.entry(api_version) {
            std::collections::btree_map::Entry::Occupied(taken) => {
                Err(ConversionError::Duplicate { version: taken.key().clone() })
            }
            std::collections::btree_map::Entry::Vacant(free) => {
                free.insert(spoke);
                Ok(self)
            }
        }
    }
}

impl<H> Conversion<H> {
    /// The hub version (`group/version`).
    pub fn hub_api_version(&self) -> &str {
        &self.hub_api_version
    }

    /// Converts one object to `desired` (an apiVersion), or says why not.
    pub fn convert(&self, object: Value, desired: &str) -> Result<Value, ConversionError> {
        let from = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        let name = object_name(&object);
        let fail = |reason: String| ConversionError::Failed {
            object: name.clone(),
            from: from.clone(),
            to: desired.to_owned(),
            reason,
        };
        if from == desired {
            return Ok(object);
        }
        let unknown = |version: &str| ConversionError::UnknownVersion {
            object: name.clone(),
            from: from.clone(),
            to: desired.to_owned(),
            version: version.to_owned(),
            known: self.spokes.keys().cloned().collect(),
        };
        let source = self.spokes.get(&from).ok_or_else(|| unknown(&from))?;
        let target = self.spokes.get(desired).ok_or_else(|| unknown(desired))?;
        let received_metadata = object.get("metadata").cloned();
        let hub = (source.to_hub)(object).map_err(fail)?;
        let mut converted = (target.from_hub)(hub).map_err(fail)?;
        keep_metadata(&mut converted, received_metadata);
        if !converted.is_object() {
            return Err(fail("the converted object is not a JSON object".to_owned()));
        }
        converted["apiVersion"] = Value::String(desired.to_owned());
        Ok(converted)
    }

    /// Answers one `ConversionReview` body: 200 with the converted objects or a `Failed`
    /// status, 400 for a body that is not a review, 413 for one larger than
    /// [`MAX_REVIEW_BYTES`](super::MAX_REVIEW_BYTES). Never panics, whatever the body.
    pub fn review(&self, body: &[u8]) -> Reply {
        if body.len() > MAX_REVIEW_BYTES {
            tracing::warn!(bytes = body.len(), "refused a conversion request: too large");
            return too_large();
        }
        let request = match parse(body) {
            Ok(request) => request,
            Err(why) => {
                tracing::warn!(%why, "refused a conversion request");
                return bad_request(&why);
            }
        };
        let desired = request.desired_api_version.clone();
        let objects = request.objects.clone();
        // A panic in a user's `TryFrom` is a failed conversion naming it, not a lost connection.
        let converted: Result<Vec<Value>, ConversionError> = objects
            .into_iter()
            .map(|object| {
                let name = object_name(&object);
                let convert = AssertUnwindSafe(|| self.convert(object, &desired));
                std::panic::catch_unwind(convert).unwrap_or_else(|panic| {
                    Err(ConversionError::Panicked {
                        object: name,
                        to: desired.clone(),
                        message: panic_message(&*panic),
                    })
                })
            })
            .collect();
        let response = ConversionResponse::for_request(request);
        let response = match converted {
            Ok(objects) => response.success(objects),
            Err(why) => {
                tracing::warn!(%why, "a conversion failed");
                response.failure(Status::failure(&why.to_string(), "ConversionFailed"))
            }
        };
        let body = serde_json::to_vec(&response.into_review()).unwrap_or_default();
        Reply { status: StatusCode::OK, body }
    }
}

/// The request of a `ConversionReview` body, or what is wrong with it.
fn parse(body: &[u8]) -> Result<ConversionRequest, String> {
    let review: ConversionReview = serde_json::from_slice(body)
        .map_err(|err| format!("the request body is not a ConversionReview: {err}"))?;
    if review.types.kind != "ConversionReview" {
        return Err(format!(
            "the request body is a {:?}, not a ConversionReview",
            review.types.kind
        ));
    }
    ConversionRequest::from_review(review)
        .map_err(|_| "the ConversionReview has no request".to_owned())
}

/// `namespace/name` (or `name`) of an object, for messages.
fn object_name(object: &Value) -> String {
    let meta = &object["metadata"];
    match (meta["namespace"].as_str(), meta["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_owned(),
        _ => "an object without a name".to_owned(),
    }
}

/// Puts the metadata received back, but for the labels and annotations the conversion set.
fn keep_metadata(converted: &mut Value, received: Option<Value>) {
    let Some(mut metadata) = received else { return };
    for field in ["labels", "annotations"] {
        if let Some(set) = converted["metadata"].get(field).filter(|v| !v.is_null()) {
            metadata[field] = set.clone();
        }
    }
    converted["metadata"] = metadata;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_panicking_conversion_fails_naming_the_object_and_the_panic() {
        // A spoke whose conversion from the hub panics, as a buggy `TryFrom` would.
        let mut conversion = Conversion::<ConfigMap>::new();
        let spoke = Spoke { to_hub: Ok, from_hub: |_| panic!("no size for you") };
        conversion.spokes.insert("other/v1".to_owned(), spoke);
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": { "uid": "u", "desiredAPIVersion": "other/v1", "objects": [
                { "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a", "namespace": "ns" } },
            ] },
        });
        let reply = conversion.review(&serde_json::to_vec(&review).unwrap());
        assert_eq!(reply.status, StatusCode::OK);
        let answer: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(answer["response"]["result"]["status"], "Failure");
        assert_eq!(
            answer["response"]["result"]["message"],
            "converting ns/a to other/v1: the conversion panicked: no size for you"
        );
    }

    #[test]
    fn a_version_added_twice_is_an_error_and_a_clone_can_be_extended() {
        let hub = Conversion::<ConfigMap>::new();
        let twice = hub.clone().spoke::<ConfigMap>();
        assert_eq!(twice.err(), Some(ConversionError::Duplicate { version: "v1".to_owned() }));
        let unknown = hub.convert(json!({ "apiVersion": "v1", "metadata": { "name": "a" } }), "v9");
        let Err(err) = unknown else { panic!("converted to an unknown version") };
        assert_eq!(
            err.to_string(),
            "converting a from v1 to v9: \"v9\" is not a version of this conversion (v1)"
        );
    }
}
