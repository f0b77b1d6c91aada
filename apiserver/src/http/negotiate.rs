//! Content negotiation, as kube-apiserver's `negotiation.NegotiateOutputMediaType` decides
//! it: which form of an object the client asked for in `Accept`, and in which encoding.
//!
//! `Accept` is read as Go's `goautoneg` reads it: comma-separated clauses, each a media type
//! (`type/subtype`, or `*`) with parameters; entries without a `/` are passed over, and so are
//! parameters without a `=`; `q` is the quality (1 when absent, 0 when it is not a number).
//! The clauses are taken by q, highest first, then a specific type before a wildcard
//! (`*/*`, `application/*`), then in the order written; the first clause the endpoint can
//! produce wins:
//! - JSON (`application/json`, `application/*`, `*/*`), in every form below;
//! - protobuf (`application/vnd.kubernetes.protobuf`): objects, lists and watches of the kinds
//!   that have a message (the built-in kinds; see the `protobuf` module), and the
//!   metadata-only forms of any kind, custom resources' too. A custom resource's object
//!   comes in the next clause: `protobuf,json`, what client-go's generated clients send for
//!   built-in kinds, gets protobuf for a pod and JSON for a custom resource;
//! - the forms `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (one object,
//!   and each event of a watch), `…;as=PartialObjectMetadataList;…` (a list), `v=v1beta1`
//!   too, and `as=Table` (what `kubectl get` asks for first; see the `table` module), which
//!   is JSON only: a table asked for in protobuf is passed over.
//!
//! YAML and CBOR are passed over (this server does not write them). A clause with `q=0` is
//! the least wanted, not refused, as kube-apiserver takes it (RFC 9110 would refuse it):
//! protobuf alone at `q=0` gets protobuf, `application/json;q=0,*/*` gets JSON (`*/*`
//! first). kube-apiserver's router wants, for built-in kinds and before any of this, one
//! clause that names a media type it serves exactly, or `*/*`: `application/*` alone is 406
//! for a pod, JSON for a custom resource, as here. An empty `Accept` gets JSON; nothing
//! acceptable: 406, with the real server's messages.
//!
//! Known difference from kube-apiserver v1.36.2 and v1.20.2, for `Accept`s no client sends:
//! their sort puts a specific type before a wildcard even at a lower q
//! (`*/*,…protobuf;q=0.5` gets protobuf there, JSON here).
//!
//! An error is a `Status`, which has a message whatever the kind: it comes in the first
//! clause without a form (`as=`) that names JSON or protobuf, JSON where none does, as the
//! real server negotiates it: a missing custom resource, asked for as `protobuf,json`, is a
//! 404 in protobuf although its list is JSON, and a missing pod asked for as kubectl asks
//! for a table is a 404 in kubectl's last clause, JSON. [`status_encoding`] decides that,
//! [`negotiate`] the rest; every layer answers JSON, and the handler re-encodes what was
//! negotiated as protobuf (`encoding::protobuf_response`).
//!
//! What the real server (1.20 and later) does with a form that does not fit the request,
//! mirrored here: a list asked for as `PartialObjectMetadata`, or one object asked for as
//! `PartialObjectMetadataList`, is 406; a watch asked for as `PartialObjectMetadataList`
//! answers 200 and ends with no events.

use axum::http::{HeaderMap, StatusCode, header};

use crate::model::status::ApiError;
use crate::protobuf::MEDIA_TYPE as PROTOBUF;

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

/// How the response body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// JSON: what every layer of this server writes.
    Json,
    /// Protobuf: the JSON answer re-encoded on its way out (see `encoding::protobuf_response`).
    Protobuf,
}

/// What an answer is made of: its form and its encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The form of the body.
    pub(crate) form: Form,
    /// Its encoding.
    pub(crate) encoding: Encoding,
}

/// What the request reads: a collection (a list or a watch) or one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    List,
    Watch,
    Object,
}

/// The answer the `Accept` header asks for; see the module docs.
///
/// `protobuf` says whether the kind has a protobuf message (built-in kinds do, custom
/// resources do not).
pub(crate) fn negotiate(
    headers: &HeaderMap,
    reading: Reading,
    kind: &str,
    protobuf: bool,
) -> Result<Answer, ApiError> {
    let accept = accept(headers);
    if accept.trim().is_empty() {
        return Ok(Answer { form: Form::Full, encoding: Encoding::Json });
    }
    if protobuf && !routed(&accept) {
        return Err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            "406: Not Acceptable",
        ));
    }
    let answer = choose(&clauses(&accept), protobuf, true).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    })?;
    match (answer.form, reading) {
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
        _ => Ok(answer),
    }
}

/// The encoding of a `Status` (an error), and of an answer of a kind with a message that
/// takes no form (a `/scale`, a review): see the module docs.
pub(crate) fn status_encoding(headers: &HeaderMap) -> Encoding {
    let accept = accept(headers);
    choose(&clauses(&accept), true, false).map_or(Encoding::Json, |answer| answer.encoding)
}

fn accept(headers: &HeaderMap) -> String {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

/// One clause of `Accept`.
#[derive(Debug)]
struct Clause<'a> {
    media: (&'a str, &'a str),
    q: f32,
    /// The form its `as`, `g` and `v` parameters ask for: `None` for a form this server does
    /// not know, `Some(Full)` for none.
    form: Option<Form>,
}

impl Clause<'_> {
    /// How closely the clause names `media_type`: 2 by name, 1 by `type/*`, 0 by `*/*`.
    fn names(&self, media_type: &str) -> Option<u8> {
        let (kind, sub) = media_type.split_once('/')?;
        match self.media {
            (k, s) if k == kind && s == sub => Some(2),
            (k, "*") if k == kind => Some(1),
            ("*", "*") => Some(0),
            _ => None,
        }
    }
}

/// The clauses of `accept`, in the order they are tried: by q, then a specific type before a
/// wildcard, then as written.
fn clauses(accept: &str) -> Vec<Clause<'_>> {
    let mut clauses: Vec<Clause<'_>> = accept.split(',').filter_map(clause).collect();
    clauses.sort_by(|a, b| {
        let wildcards = |c: &Clause<'_>| (c.media.0 == "*", c.media.1 == "*");
        b.q.total_cmp(&a.q).then(wildcards(a).cmp(&wildcards(b)))
    });
    clauses
}

fn clause(entry: &str) -> Option<Clause<'_>> {
    let mut parts = entry.split(';');
    let media = parts.next()?.trim();
    let media = match media.split_once('/') {
        Some((kind, sub)) if !kind.trim().is_empty() && !sub.contains('/') => {
            (kind.trim(), sub.trim())
        }
        None if media == "*" => ("*", "*"),
        _ => return None,
    };
    let (mut q, mut r#as, mut group, mut version, mut transform) = (1.0, None, None, None, false);
    for (name, value) in parts.filter_map(|p| p.split_once('=')) {
        let value = value.trim();
        match name.trim() {
            "q" => q = value.parse().unwrap_or(0.0),
            "as" => (r#as, transform) = (Some(value), true),
            "g" => (group, transform) = (Some(value), true),
            "v" => (version, transform) = (Some(value), true),
            _ => {} // stream=watch, pretty and the like
        }
    }
    let form = match transform {
        false => Some(Form::Full),
        true => form(r#as, group, version),
    };
    Some(Clause { media, q, form })
}

/// The form of `as`, `g` and `v`, where it is one this server produces.
fn form(r#as: Option<&str>, group: Option<&str>, version: Option<&str>) -> Option<Form> {
    if group != Some("meta.k8s.io") {
        return None;
    }
    let version = match version {
        Some("v1") => "v1",
        Some("v1beta1") => "v1beta1",
        _ => return None,
    };
    match r#as? {
        "PartialObjectMetadata" => Some(Form::Metadata(version)),
        "PartialObjectMetadataList" => Some(Form::MetadataList(version)),
        "Table" => Some(Form::Table(version)),
        _ => None,
    }
}

/// The first answer of `clauses` this server produces (JSON before protobuf within a clause
/// that names both): protobuf for a Full form only where the kind has a `message`; forms
/// only where `forms` (an error's `Status` takes none). A clause at `q=0` counts as any
/// other, last by its q.
fn choose(clauses: &[Clause<'_>], message: bool, forms: bool) -> Option<Answer> {
    clauses.iter().find_map(|c| {
        let form = c.form?;
        if form != Form::Full && !forms {
            return None;
        }
        if c.names("application/json").is_some() {
            return Some(Answer { form, encoding: Encoding::Json });
        }
        let fits = match form {
            Form::Full => message,
            Form::Metadata(_) | Form::MetadataList(_) => true,
            Form::Table(_) => false,
        };
        (fits && c.names(PROTOBUF).is_some())
            .then_some(Answer { form, encoding: Encoding::Protobuf })
    })
}

/// Whether kube-apiserver's router (go-restful) routes `accept` to a built-in kind's
/// handler: one entry names a media type it serves exactly, or `*/*`.
fn routed(accept: &str) -> bool {
    accept.split(',').any(|entry| {
        let media = entry.split(';').next().unwrap_or("").trim();
        matches!(media, "*/*" | "application/json" | "application/yaml") || media == PROTOBUF
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const JSON: &str = "application/json";
    const TABLE: &str = "as=Table;v=v1;g=meta.k8s.io";
    const LIST: &str = "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    /// An answer's form and encoding, or the refusal's code.
    type Got = Result<(Form, Encoding), u16>;

    /// The answer to `value` about a kind with a message (`message`) or without.
    fn answer(value: &str, reading: Reading, message: bool) -> Got {
        let answer = negotiate(&headers(value), reading, "Pod", message);
        answer.map(|a| (a.form, a.encoding)).map_err(|e| e.code.as_u16())
    }

    /// The answers to `value`: for a list of a built-in kind and of a custom resource, and
    /// the encoding of an error.
    fn answers(value: &str) -> (Got, Got, Encoding) {
        let error = status_encoding(&headers(value));
        (answer(value, Reading::List, true), answer(value, Reading::List, false), error)
    }

    use Encoding::{Json, Protobuf};
    use Form::Full;

    #[test]
    fn the_first_clause_the_endpoint_produces_wins() {
        let client_go = format!("{PROTOBUF},{JSON}");
        assert_eq!(answers(&client_go), (Ok((Full, Protobuf)), Ok((Full, Json)), Protobuf));
        assert_eq!(
            answers(&format!("{JSON},{PROTOBUF}")),
            (Ok((Full, Json)), Ok((Full, Json)), Json)
        );
        assert_eq!(answers(PROTOBUF), (Ok((Full, Protobuf)), Err(406), Protobuf));
        assert_eq!(answers(JSON), (Ok((Full, Json)), Ok((Full, Json)), Json));
        // Watches and gets as lists.
        assert_eq!(answer(&client_go, Reading::Watch, true), Ok((Full, Protobuf)));
        assert_eq!(answer(&client_go, Reading::Object, true), Ok((Full, Protobuf)));
        // No Accept: JSON.
        assert_eq!(
            negotiate(&HeaderMap::new(), Reading::List, "Pod", true).map(|a| a.encoding).ok(),
            Some(Json)
        );
        assert_eq!(status_encoding(&HeaderMap::new()), Json);
    }

    #[test]
    fn clauses_are_taken_by_quality_then_specificity_then_order() {
        let q = |value: &str| answers(value).0;
        assert_eq!(q(&format!("{JSON};q=0.5,{PROTOBUF}")), Ok((Full, Protobuf)));
        assert_eq!(q(&format!("{PROTOBUF};q=0.5,{JSON};q=0.9")), Ok((Full, Json)));
        assert_eq!(q(&format!("{PROTOBUF};q=0.5,{JSON};q=0.5")), Ok((Full, Protobuf)));
        assert_eq!(q(&format!("{JSON};q=0.5,{PROTOBUF};q=0.5")), Ok((Full, Json)));
        // A q that is not a number is 0, as Go parses it.
        assert_eq!(q(&format!("{JSON};q=high,{PROTOBUF}")), Ok((Full, Protobuf)));
        // A specific type before a wildcard of the same q; `*/*` and `application/*` are JSON.
        assert_eq!(q(&format!("*/*,{PROTOBUF}")), Ok((Full, Protobuf)));
        assert_eq!(q(&format!("application/*,{PROTOBUF}")), Ok((Full, Protobuf)));
        assert_eq!(q(&format!("*/*;q=0.5,{PROTOBUF}")), Ok((Full, Protobuf)));
        assert_eq!(q(&format!("*/*,{PROTOBUF};q=0.5")), Ok((Full, Json)));
        assert_eq!(answers("*/*"), (Ok((Full, Json)), Ok((Full, Json)), Json));
        // `*` is `*/*`, but kube-apiserver's router routes only a `*/*` to a built-in kind.
        assert_eq!(answers("*"), (Err(406), Ok((Full, Json)), Json));
    }

    #[test]
    fn q_zero_is_the_least_wanted() {
        assert_eq!(
            answers(&format!("{PROTOBUF};q=0,{JSON}")),
            (Ok((Full, Json)), Ok((Full, Json)), Json)
        );
        assert_eq!(answers(&format!("{PROTOBUF};q=0")), (Ok((Full, Protobuf)), Err(406), Protobuf));
        assert_eq!(
            answers(&format!("{PROTOBUF};q=0,*/*")),
            (Ok((Full, Json)), Ok((Full, Json)), Json)
        );
        assert_eq!(answers(&format!("{JSON};q=0,*/*")), (Ok((Full, Json)), Ok((Full, Json)), Json));
        assert_eq!(
            answers(&format!("{JSON};q=0,{PROTOBUF};q=0")),
            (Ok((Full, Json)), Ok((Full, Json)), Json)
        );
        assert_eq!(answers("*/*;q=0"), (Ok((Full, Json)), Ok((Full, Json)), Json));
    }

    #[test]
    fn custom_resources_take_the_next_clause_and_their_errors_protobuf() {
        let client_go = format!("{PROTOBUF},{JSON}");
        assert_eq!(answer(&client_go, Reading::List, false), Ok((Full, Json)));
        assert_eq!(answer(&client_go, Reading::Watch, false), Ok((Full, Json)));
        assert_eq!(answer(&client_go, Reading::Object, false), Ok((Full, Json)));
        assert_eq!(status_encoding(&headers(&client_go)), Protobuf);
        // The router's wildcard rule is for built-in kinds.
        assert_eq!(answers("application/*"), (Err(406), Ok((Full, Json)), Json));
        assert_eq!(answers("text/plain"), (Err(406), Err(406), Json));
    }

    #[test]
    fn tables_are_json_only() {
        let kubectl = format!("{PROTOBUF};{TABLE},{JSON};{TABLE},{JSON}");
        let table = Form::Table("v1");
        assert_eq!(answers(&kubectl), (Ok((table, Json)), Ok((table, Json)), Json));
        assert_eq!(answers(&format!("{PROTOBUF};{TABLE}")), (Err(406), Err(406), Json));
        assert_eq!(
            answers(&format!("{PROTOBUF};{TABLE},{JSON}")),
            (Ok((Full, Json)), Ok((Full, Json)), Json)
        );
        assert_eq!(
            answers(&format!("{PROTOBUF};{TABLE},{PROTOBUF}")),
            (Ok((Full, Protobuf)), Err(406), Protobuf)
        );
        // An error takes the first clause without a form.
        assert_eq!(status_encoding(&headers(&format!("{JSON};{TABLE},{PROTOBUF}"))), Protobuf);
        let v1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(answer(v1beta1, Reading::Watch, true), Ok((Form::Table("v1beta1"), Json)));
    }

    #[test]
    fn metadata_is_protobuf_for_every_kind() {
        let list = Form::MetadataList("v1");
        let client_go = format!("{PROTOBUF};{LIST},{JSON};{LIST},{JSON}");
        assert_eq!(answers(&client_go), (Ok((list, Protobuf)), Ok((list, Protobuf)), Json));
        assert_eq!(answers(&format!("{JSON};{LIST}")), (Ok((list, Json)), Ok((list, Json)), Json));
        let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(answer(one, Reading::Watch, true), Ok((Form::Metadata("v1beta1"), Json)));
        assert_eq!(answer(one, Reading::Object, false), Ok((Form::Metadata("v1beta1"), Json)));
    }

    #[test]
    fn garbage_entries_and_parameters_are_passed_over() {
        let q = |value: &str| answers(value).0;
        assert_eq!(
            q(&format!("foo,;;,/json, {PROTOBUF} ;pretty=1;junk,{JSON}")),
            Ok((Full, Protobuf))
        );
        assert_eq!(q(&format!("{PROTOBUF};stream=watch")), Ok((Full, Protobuf)));
        // Media types are compared as written, as Go compares them.
        assert_eq!(answers("APPLICATION/JSON"), (Err(406), Err(406), Json));
        // An unknown form is passed over: the next clause wins.
        assert_eq!(q(&format!("{PROTOBUF};as=Foo;g=meta.k8s.io;v=v1,{JSON}")), Ok((Full, Json)));
        assert_eq!(
            q(&format!("{JSON};{LIST},{PROTOBUF}").replace("v=v1", "v=v2")),
            Ok((Full, Protobuf))
        );
        assert_eq!(q("application/yaml"), Err(406));
    }

    #[test]
    fn forms_that_do_not_fit_the_request_are_406() {
        let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(answer(one, Reading::List, true), Err(406));
        assert_eq!(answer(&format!("{JSON};{LIST}"), Reading::Object, true), Err(406));
        assert_eq!(
            answer(&format!("{JSON};{LIST}"), Reading::Watch, true),
            Ok((Form::MetadataList("v1"), Json))
        );
    }
}
