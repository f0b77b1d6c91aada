//! Whether an object is one a list and watch's selectors select, told on the client from its
//! labels, name and namespace: label selectors whole (`k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k`, `!k`), field selectors on `metadata.name` and `metadata.namespace`
//! (`=`, `==`, `!=`). What cannot be told here (another field, a selector that does not parse)
//! counts as selected: the caller then waits as if the cache held the object.

use std::collections::BTreeMap;

/// Whether `labels` satisfy every requirement of the label `selector`.
pub(crate) fn labels_match(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    split_requirements(selector).iter().all(|r| label_requirement(r.trim(), labels))
}

/// Whether an object named `name` in `namespace` satisfies the field `selector`, as far as it
/// asks about `metadata.name` and `metadata.namespace`.
pub(crate) fn fields_match(selector: &str, name: &str, namespace: Option<&str>) -> bool {
    selector.split(',').map(str::trim).filter(|r| !r.is_empty()).all(|requirement| {
        let (field, value, equal) = match split_operator(requirement) {
            Some(parts) => parts,
            None => return true,
        };
        let actual = match field {
            "metadata.name" => name,
            "metadata.namespace" => namespace.unwrap_or_default(),
            _ => return true,
        };
        (actual == value) == equal
    })
}

/// `key=value`, `key==value` or `key!=value` as (key, value, whether it asks for equality).
fn split_operator(requirement: &str) -> Option<(&str, &str, bool)> {
    if let Some((key, value)) = requirement.split_once("!=") {
        return Some((key.trim(), value.trim(), false));
    }
    let (key, value) = requirement.split_once('=')?;
    let value = value.strip_prefix('=').unwrap_or(value);
    Some((key.trim(), value.trim(), true))
}

/// The requirements of a label selector: split at the commas outside parentheses.
fn split_requirements(selector: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

fn label_requirement(requirement: &str, labels: &BTreeMap<String, String>) -> bool {
    if let Some(key) = requirement.strip_prefix('!') {
        return !labels.contains_key(key.trim());
    }
    for (operator, wanted) in [(" notin ", false), (" in ", true)] {
        if let Some((key, set)) = requirement.split_once(operator) {
            let set = set.trim().trim_start_matches('(').trim_end_matches(')');
            let found = labels
                .get(key.trim())
                .is_some_and(|value| set.split(',').any(|v| v.trim() == value));
            return found == wanted;
        }
    }
    match split_operator(requirement) {
        Some((key, value, equal)) => match labels.get(key) {
            Some(actual) => (actual == value) == equal,
            // A `!=` is satisfied by a label that is not there.
            None => !equal,
        },
        None => labels.contains_key(requirement),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_as_the_server_reads_them() {
        let labels: BTreeMap<String, String> =
            [("app", "web"), ("tier", "front")].map(|(k, v)| (k.into(), v.into())).into();
        for (selector, matches) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db),tier", true),
            ("app notin (web)", false),
            ("app in (db)", false),
            ("tier,!missing", true),
            ("!app", false),
            ("missing", false),
            ("app=web,tier=back", false),
        ] {
            assert_eq!(labels_match(selector, &labels), matches, "{selector}");
        }
    }

    #[test]
    fn field_selectors_on_name_and_namespace() {
        assert!(fields_match("metadata.name=a", "a", Some("ns")));
        assert!(!fields_match("metadata.name=a", "b", Some("ns")));
        assert!(!fields_match("metadata.namespace!=ns", "a", Some("ns")));
        assert!(fields_match("metadata.namespace==ns,metadata.name!=b", "a", Some("ns")));
        assert!(fields_match("status.phase=Running", "a", None), "not told here: selected");
    }
}
