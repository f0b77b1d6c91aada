//! Label and field selectors, parsed from query strings and matched against stored objects.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, and
//! `k>n` / `k<n` for integers, comma-separated (all must hold). Field selectors: `=`, `==` and
//! `!=` on `metadata.name`, `metadata.namespace`, and for pods `spec.nodeName` and
//! `status.phase`; any other field is refused with 400, as the real server does.

use std::collections::BTreeMap;

use super::status::{ApiError, ApiResult};

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn bad_selector(selector: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why} in selector {selector:?}"))
}

fn check_key(key: &str, selector: &str) -> ApiResult<String> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(bad_selector(selector, &format!("invalid key {key:?}")))
    }
}

fn parse_set(rest: &str, selector: &str) -> ApiResult<Vec<String>> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad_selector(selector, "expected a parenthesised set of values"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub(crate) fn parse(selector: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top_level(selector) {
            let part = part.trim();
            if part.is_empty() {
                return Err(bad_selector(selector, "empty requirement"));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(check_key(key.trim(), selector)?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(check_key(k.trim(), selector)?, v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(check_key(k.trim(), selector)?, v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(check_key(k.trim(), selector)?, v.trim().to_owned())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(check_key(k.trim(), selector)?, parse_set(rest, selector)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(check_key(k.trim(), selector)?, parse_set(rest, selector)?)
            } else if let Some((k, n)) = part.split_once('>') {
                let n =
                    n.trim().parse().map_err(|_| bad_selector(selector, "expected an integer"))?;
                Requirement::GreaterThan(check_key(k.trim(), selector)?, n)
            } else if let Some((k, n)) = part.split_once('<') {
                let n =
                    n.trim().parse().map_err(|_| bad_selector(selector, "expected an integer"))?;
                Requirement::LessThan(check_key(k.trim(), selector)?, n)
            } else {
                Requirement::Exists(check_key(part, selector)?)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::GreaterThan(k, n) => {
                labels.get(k).and_then(|l| l.parse::<i64>().ok()).is_some_and(|l| l > *n)
            }
            Requirement::LessThan(k, n) => {
                labels.get(k).and_then(|l| l.parse::<i64>().ok()).is_some_and(|l| l < *n)
            }
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fields a field selector can name, read off an object when it is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// Pods only.
    pub(crate) node_name: Option<String>,
    /// Pods only.
    pub(crate) phase: Option<String>,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(FieldName, bool, String)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldName {
    Name,
    Namespace,
    NodeName,
    Phase,
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value; `pods` enables the pod-only fields.
    pub(crate) fn parse(selector: &str, pods: bool) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in selector.split(',') {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let name = match field.trim() {
                "metadata.name" => FieldName::Name,
                "metadata.namespace" => FieldName::Namespace,
                "spec.nodeName" if pods => FieldName::NodeName,
                "status.phase" if pods => FieldName::Phase,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )));
                }
            };
            reqs.push((name, equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether `fields` satisfy every requirement.
    pub(crate) fn matches(&self, fields: &Fields) -> bool {
        self.0.iter().all(|(name, equal, value)| {
            let actual = match name {
                FieldName::Name => fields.name.as_str(),
                FieldName::Namespace => fields.namespace.as_str(),
                FieldName::NodeName => fields.node_name.as_deref().unwrap_or(""),
                FieldName::Phase => fields.phase.as_deref().unwrap_or(""),
            };
            (actual == value) == *equal
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "x notin (a)",
            "app",
            "!x",
            "app=web,tier in (front)",
            "n>4",
            "n<6",
            "tier notin (back, mid)",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&l), "{s} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "x",
            "!app",
            "n>5",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&l), "{s} should not match");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("app=web,").is_err());
    }

    #[test]
    fn field_selector_fields() {
        let f = Fields {
            name: "p".into(),
            namespace: "default".into(),
            node_name: Some("n1".into()),
            phase: Some("Running".into()),
        };
        assert!(
            FieldSelector::parse("metadata.name=p,status.phase==Running", true)
                .unwrap()
                .matches(&f)
        );
        assert!(FieldSelector::parse("spec.nodeName!=n2", true).unwrap().matches(&f));
        assert!(!FieldSelector::parse("metadata.namespace=kube-system", true).unwrap().matches(&f));
        assert!(FieldSelector::parse("status.phase=Running", false).is_err(), "pods only");
        assert!(FieldSelector::parse("spec.foo=bar", true).is_err());
    }
}
