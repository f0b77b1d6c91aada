//! Content negotiation: which form of an object the client asked for in `Accept`, as
//! kube-apiserver decides it.
//!
//! The first media type of the `Accept` list that this server can produce wins: plain JSON
//! (`application/json`, `*/*`, `application/*`), or the metadata-only forms
//! `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (one object, and each event
//! of a watch) and `…;as=PartialObjectMetadataList;…` (a list); `v=v1beta1` works too.
//! `as=Table` (what `kubectl get` asks for first) is produced too (see the `table` module).
//! YAML and CBOR are passed over, and so is protobuf while a JSON form is listed, so a client
//! that lists JSON after them gets JSON; a client that accepts protobuf alone gets it, for
//! built-in kinds (see the `protobuf` module). Nothing acceptable: 406, with the real server's
//! messages.
//!
//! What the real server (1.20 and later) does with a form that does not fit the request,
//! mirrored here: a list asked for as `PartialObjectMetadata`, or one object asked for as
//! `PartialObjectMetadataList`, is 406; a watch asked for as `PartialObjectMetadataList`
//! answers 200 and ends with no events.

use axum::http::{HeaderMap, StatusCode, header};

use crate::model::status::ApiError;

/// The form of the response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// The objects as stored.
    Full,
    /// `PartialObjectMetadata` (one object, or each event of a watch), at this `meta.k8s.io`
    /// version.
    Metadata(&'static str),
    /// `PartialObjectMetadataList`, at this `meta.k8s.io` version.
    MetadataList(&'static str),
    /// `Table`, at this `meta.k8s.io` version.
    Table(&'static str),
}

/// What the request reads: a collection (a list or a watch) or one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    List,
    Watch,
    Object,
}

/// The form the `Accept` header asks for; see the module docs.
///
/// `protobuf` says whether the kind has a protobuf message (built-in kinds do, custom resources
/// do not): protobuf is produced only for a client that accepts nothing in JSON (see
/// [`protobuf_only`]), and tables never.
pub(crate) fn negotiate(
    headers: &HeaderMap,
    reading: Reading,
    kind: &str,
    protobuf: bool,
) -> Result<Form, ApiError> {
    let accept = accept(headers);
    if accept.trim().is_empty() {
        return Ok(Form::Full);
    }
    let json = accept.split(',').find_map(|entry| candidate(entry, JSON));
    let form = json
        .or_else(|| {
            let form = accept.split(',').find_map(|entry| candidate(entry, PROTOBUF))?;
            (protobuf && !matches!(form, Form::Table(_))).then_some(form)
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_ACCEPTABLE,
                "NotAcceptable",
                "only the following media types are accepted: application/json",
            )
        })?;
    match (form, reading) {
        (Form::Metadata(_), Reading::List) => Err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!(
                "you requested PartialObjectMetadata, but the requested object is a list (*core.{kind}List)"
            ),
        )),
        (Form::MetadataList(_), Reading::Object) => Err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list (*core.{kind})"
            ),
        )),
        _ => Ok(form),
    }
}

/// Whether the answer is to be protobuf: `Accept` names protobuf and nothing in JSON. (The
/// real server answers protobuf whenever it comes first; this one keeps JSON, which every
/// client that also lists it reads, and which tests can read too.)
pub(crate) fn protobuf_only(headers: &HeaderMap) -> bool {
    let accept = accept(headers);
    accept.split(',').all(|entry| candidate(entry, JSON).is_none())
        && accept.split(',').any(|entry| candidate(entry, PROTOBUF).is_some())
}

fn accept(headers: &HeaderMap) -> String {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

/// The media types of `candidate`'s two passes.
const JSON: &[&str] = &["application/json", "*/*", "application/*"];
const PROTOBUF: &[&str] = &[crate::protobuf::MEDIA_TYPE];

/// The form one entry of `Accept` asks for, if its media type is one of `media_types`.
fn candidate(entry: &str, media_types: &[&str]) -> Option<Form> {
    let mut parts = entry.split(';').map(str::trim);
    let media = parts.next()?.to_ascii_lowercase();
    let (mut r#as, mut group, mut version) = (None, None, None);
    for param in parts {
        let (name, value) = param.split_once('=')?;
        match name.trim() {
            "as" => r#as = Some(value.trim()),
            "g" => group = Some(value.trim()),
            "v" => version = Some(value.trim()),
            _ => {} // q= and the like
        }
    }
    if !media_types.contains(&media.as_str()) {
        return None;
    }
    let Some(r#as) = r#as else { return Some(Form::Full) };
    if group != Some("meta.k8s.io") {
        return None;
    }
    let version = match version {
        Some("v1") => "v1",
        Some("v1beta1") => "v1beta1",
        _ => return None,
    };
    match r#as {
        "PartialObjectMetadata" => Some(Form::Metadata(version)),
        "PartialObjectMetadataList" => Some(Form::MetadataList(version)),
        "Table" => Some(Form::Table(version)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accept(value: &str, reading: Reading) -> Result<Form, u16> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        negotiate(&headers, reading, "Pod", true).map_err(|e| e.code.as_u16())
    }

    #[test]
    fn the_first_form_the_server_produces_wins() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(accept(list, Reading::List), Ok(Form::MetadataList("v1")));
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(accept(kubectl, Reading::List), Ok(Form::Table("v1")));
        let protobuf_first = "application/vnd.kubernetes.protobuf,application/json";
        assert_eq!(accept(protobuf_first, Reading::List), Ok(Form::Full));
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(accept(client_go, Reading::List), Ok(Form::MetadataList("v1")));
        assert_eq!(accept("*/*", Reading::Object), Ok(Form::Full));
        assert_eq!(
            accept(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
                Reading::Watch
            ),
            Ok(Form::Metadata("v1beta1"))
        );
    }

    #[test]
    fn protobuf_is_produced_only_for_clients_that_accept_nothing_else() {
        let only = "application/vnd.kubernetes.protobuf";
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(protobuf_only(&headers(only)));
        assert!(!protobuf_only(&headers("application/vnd.kubernetes.protobuf,application/json")));
        assert!(!protobuf_only(&headers("application/json")));
        assert_eq!(accept(only, Reading::Object), Ok(Form::Full));
        let metadata =
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(accept(metadata, Reading::List), Ok(Form::MetadataList("v1")));
        let table = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
        assert_eq!(accept(table, Reading::List), Err(406));
        // A custom resource has no message.
        let custom = negotiate(&headers(only), Reading::Object, "Widget", false);
        assert_eq!(custom.map_err(|e| e.code.as_u16()), Err(406));
    }

    #[test]
    fn unproducible_or_misfit_forms_are_406() {
        assert_eq!(accept("application/yaml", Reading::List), Err(406));
        assert_eq!(accept("application/json;as=Foo;g=meta.k8s.io;v=v1", Reading::List), Err(406));
        assert_eq!(
            accept(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2",
                Reading::List
            ),
            Err(406)
        );
        assert_eq!(
            accept("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", Reading::List),
            Err(406)
        );
        assert_eq!(
            accept(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                Reading::Object
            ),
            Err(406)
        );
    }
}
