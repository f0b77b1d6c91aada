//! One object read live, as client-go's generated clients read built-in kinds: protobuf
//! first, JSON second.
//!
//! # Contract
//! - [`get_opt`] asks `protobuf,json` when the process's [`WireFormat`] default (see
//!   [`WIRE_FORMAT_ENV`](super::WIRE_FORMAT_ENV)) is protobuf and the kind has a message;
//!   otherwise it is kube's own `Api::get_opt`, in JSON.
//! - The answer is decoded by its `Content-Type`; `managedFields` are kept (the caller may
//!   write the object back).
//! - 404 is `None`; any other error answer is `Error::Api` with the server's `Status`, read
//!   from protobuf or JSON (see `send`); a body that does not decode is `Error::SerdeError`.
//! - An object holding a field the vendored messages lack (a server newer than them) is read
//!   again in JSON, and that kind is read in JSON for the rest of the process, with one
//!   warning naming the message and field number: a get never drops a newer server's fields.

use std::collections::HashSet;
use std::sync::{LazyLock, OnceLock};

use kube_client::api::GetParams;
use kube_client::core::Request;
use kube_client::{Api, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::decode::{self, DecodeError};
use super::format::{Encoding, Read, WireFormat, accept_for};
use super::send::send;

/// The kinds (`apiVersion/kind`) whose protobuf held a field the messages lack: read in
/// JSON from then on.
static READ_JSON: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// The process's default format, read from the environment once.
fn process_default() -> WireFormat {
    static DEFAULT: OnceLock<WireFormat> = OnceLock::new();
    *DEFAULT.get_or_init(WireFormat::default)
}

/// The object `name` of `api`, or `None` if there is none (module docs).
pub(crate) async fn get_opt<K>(
    api: &Api<K>,
    name: &str,
    dyntype: &K::DynamicType,
) -> kube_client::Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(get_in(api, name, dyntype, process_default()).await?.map(|(object, _)| object))
}

/// As [`get_opt`] in `format`, with the encoding the object came in.
pub(crate) async fn get_in<K>(
    api: &Api<K>,
    name: &str,
    dyntype: &K::DynamicType,
    format: WireFormat,
) -> kube_client::Result<Option<(K, Encoding)>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let (api_version, kind_name) = (K::api_version(dyntype), K::kind(dyntype));
    let kind = format!("{api_version}/{kind_name}");
    let accept = accept_for(&api_version, &kind_name, Read::Objects, format)
        .filter(|_| !READ_JSON.lock().contains(&kind));
    if let Some(accept) = accept {
        match get_protobuf(api, name, accept).await {
            Err(Skewed(what)) => {
                if READ_JSON.lock().insert(kind.clone()) {
                    tracing::warn!(
                        kind,
                        "protobuf from a server newer than this build's messages: {what}; \
                         reading this kind in JSON from now on"
                    );
                }
            }
            Ok(read) => return read,
        }
    }
    Ok(api.get_opt(name).await?.map(|object| (object, Encoding::Json)))
}

/// A protobuf object held a field the messages lack (the error).
struct Skewed(String);

/// One get that asks protobuf first; `Err` when its protobuf holds an unknown field.
async fn get_protobuf<K: Resource + Clone + DeserializeOwned>(
    api: &Api<K>,
    name: &str,
    accept: &'static str,
) -> Result<kube_client::Result<Option<(K, Encoding)>>, Skewed> {
    let request = Request::new(api.resource_url()).get(name, &GetParams::default());
    let mut request = match request {
        Ok(request) => request,
        Err(err) => return Ok(Err(kube_client::Error::BuildRequest(err))),
    };
    request.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
    let client = api.clone().into_client();
    let answer = match send(&client, request).await {
        Ok(answer) => answer,
        Err(kube_client::Error::Api(status)) if status.code == 404 => return Ok(Ok(None)),
        Err(err) => return Ok(Err(err)),
    };
    let encoding = answer.encoding;
    let bytes = match answer.bytes().await {
        Ok(bytes) => bytes,
        Err(err) => return Ok(Err(err)),
    };
    let decoded = match encoding {
        Encoding::Json => serde_json::from_slice(&bytes).map_err(kube_client::Error::SerdeError),
        Encoding::Protobuf => match decode::object::<K>(&bytes) {
            Ok(object) => Ok(object),
            Err(err) => match decode::unknown_field(&err) {
                Some(what) => return Err(Skewed(what)),
                None => Err(undecodable(&err)),
            },
        },
    };
    Ok(decoded.map(|object| Some((object, encoding))))
}

fn undecodable(err: &DecodeError) -> kube_client::Error {
    kube_client::Error::SerdeError(serde::de::Error::custom(format!(
        "a protobuf object does not decode: {err}"
    )))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube_client::api::{ApiResource, DynamicObject, PostParams};
    use serde_json::json;

    use super::*;

    async fn created<K>(api: &Api<K>, object: serde_json::Value) -> K
    where
        K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let object = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap()
    }

    /// The embedded server answers protobuf only to a request that asks for it first, as
    /// kube-apiserver does: a get that comes back in protobuf asked for it, and it decodes to
    /// what the same get reads in JSON.
    #[tokio::test]
    async fn a_get_of_a_built_in_kind_reads_protobuf_and_decodes_what_json_reads() {
        let server = ctrlkit_apiserver::ApiServer::start().await.unwrap();
        let leases: Api<Lease> = Api::namespaced(server.client(), "default");
        created(
            &leases,
            json!({"metadata": {"name": "l", "labels": {"a": "b"}},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                     "renewTime": "2026-12-07T18:00:00.123456Z"}}),
        )
        .await;
        let (lease, encoding) =
            get_in(&leases, "l", &(), WireFormat::Protobuf).await.unwrap().unwrap();
        assert_eq!(encoding, Encoding::Protobuf);
        assert_eq!(lease, leases.get("l").await.unwrap());

        let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        created(&configmaps, json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).await;
        let resource = ApiResource::erase::<ConfigMap>(&());
        let dynamic: Api<DynamicObject> =
            Api::namespaced_with(server.client(), "default", &resource);
        let (object, encoding) =
            get_in(&dynamic, "c", &resource, WireFormat::Protobuf).await.unwrap().unwrap();
        assert_eq!(encoding, Encoding::Protobuf);
        assert_eq!(object.data["data"], json!({"k": "v"}));
        assert_eq!(serde_json::to_value(object).unwrap(), {
            serde_json::to_value(dynamic.get("c").await.unwrap()).unwrap()
        });

        let missing = get_in(&leases, "none", &(), WireFormat::Protobuf).await.unwrap();
        assert!(missing.is_none(), "a 404 in protobuf is None");
    }

    #[tokio::test]
    async fn json_is_read_where_protobuf_is_off_or_the_kind_has_no_message() {
        let server = ctrlkit_apiserver::ApiServer::start().await.unwrap();
        let leases: Api<Lease> = Api::namespaced(server.client(), "default");
        created(&leases, json!({"metadata": {"name": "l"}})).await;
        let (_, encoding) = get_in(&leases, "l", &(), WireFormat::Json).await.unwrap().unwrap();
        assert_eq!(encoding, Encoding::Json);
        // A custom resource has no message: JSON, though protobuf is asked for built-in kinds.
        let crds: Api<CustomResourceDefinition> = Api::all(server.client());
        created(
            &crds,
            json!({"metadata": {"name": "widgets.example.com"}, "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema":
                    {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        )
        .await;
        let widget = ApiResource::from_gvk(&kube_client::core::GroupVersionKind::gvk(
            "example.com",
            "v1",
            "Widget",
        ));
        let widgets: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &widget);
        let mut object = DynamicObject::new("w", &widget);
        object.data = json!({"spec": {"size": 1}});
        // The CRD is served once it is established; the create is retried until then.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while let Err(err) = widgets.create(&PostParams::default(), &object).await {
            assert!(tokio::time::Instant::now() < deadline, "widgets never served: {err}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let (read, encoding) =
            get_in(&widgets, "w", &widget, WireFormat::Protobuf).await.unwrap().unwrap();
        assert_eq!(encoding, Encoding::Json, "a custom resource has no message");
        assert_eq!(read.data["spec"]["size"], 1);
        assert!(get_in(&leases, "none", &(), WireFormat::Json).await.unwrap().is_none());
    }

    /// A Secret in protobuf with field 99, which no vendored message has, as a newer server
    /// would send it; in JSON otherwise. (A kind no other case reads: the kinds read in JSON
    /// are the process's.)
    async fn newer_server(
        request: http::Request<kube_client::client::Body>,
    ) -> Result<http::Response<kube_client::client::Body>, std::convert::Infallible> {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default"}, "stringData": {}, "type": "me"});
        let accept = request.headers().get(http::header::ACCEPT).map(|v| v.to_str().unwrap());
        let (content_type, body) =
            if accept.is_some_and(|a| a.starts_with(super::super::format::PROTOBUF)) {
                let whole = ctrlkit_protobuf::transcode::from_json(&secret).unwrap();
                let envelope = ctrlkit_protobuf::envelope(&whole).unwrap();
                // `k8s\0`, then the envelope's TypeMeta (field 1) as it was and its raw object
                // (field 2) with field 99 appended.
                let mut raw = envelope.raw.to_vec();
                raw.extend([0x98, 0x06, 0x01]);
                let type_meta_end = whole.len() - envelope.raw.len() - 2;
                let mut body = whole[..type_meta_end].to_vec();
                body.push(0x12);
                body.push(u8::try_from(raw.len()).unwrap());
                body.extend(raw);
                ("application/vnd.kubernetes.protobuf", body)
            } else {
                ("application/json", serde_json::to_vec(&secret).unwrap())
            };
        let response = http::Response::builder().header("content-type", content_type);
        Ok(response.body(kube_client::client::Body::from(body)).unwrap())
    }

    /// A get whose protobuf holds a field the messages lack reads the object again in JSON,
    /// and reads that kind in JSON from then on: it never returns the object without it.
    #[tokio::test]
    async fn a_get_meeting_an_unknown_field_reads_json() {
        let client = kube_client::Client::new(tower::service_fn(newer_server), "default");
        let secrets: Api<Secret> = Api::namespaced(client, "default");
        let (secret, encoding) =
            get_in(&secrets, "s", &(), WireFormat::Protobuf).await.unwrap().unwrap();
        assert_eq!(encoding, Encoding::Json);
        assert_eq!(secret.type_.as_deref(), Some("me"));
        assert!(READ_JSON.lock().contains("v1/Secret"));
    }
}
