//! A request's query, read once into one typed value ([`Options`]) that every verb takes:
//! what writes read (`dryRun`, `fieldManager`, `fieldValidation`, `force`,
//! `propagationPolicy`) and what lists and watches read (`watch`, the selectors,
//! `resourceVersion`, `resourceVersionMatch`, `limit`, `continue`, `allowWatchBookmarks`,
//! `sendInitialEvents`, `timeoutSeconds`, `includeObject`).
//!
//! Flags and numbers are decoded here as the real server's decoder reads them (`true` or
//! `1`; a `limit` or `timeoutSeconds` that is not a positive integer is no limit; `dryRun`
//! is a dry run only as `All`). Values whose meaning, and whose error, depend on the verb
//! stay as the client sent them, empty ones dropped: a `resourceVersion` (a list refuses one
//! with `continue`, a watch reads `0` as "from now"), the selectors (a field selector's
//! fields depend on the kind), `fieldValidation` (its 422 names the verb's options kind).
//! An option the server does not know is ignored, as the real server ignores it.

use std::collections::HashMap;
use std::time::Duration;

use crate::http::table::Include;

/// A request's options.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// `watch=true`: a GET of a collection that is a watch.
    pub(crate) watch: bool,
    /// `dryRun=All`: a write worked out and answered, nothing stored. (A delete's options in
    /// its body may ask for one too; the delete reads them.)
    pub(crate) dry_run: bool,
    /// `fieldManager`, as sent (an apply refuses an empty one).
    pub(crate) field_manager: Option<String>,
    /// `fieldValidation`, as sent: `Strict`, `Warn` (unset), `Ignore`, or a 422 on a write.
    pub(crate) field_validation: Option<String>,
    /// `force`: an apply that takes the fields other managers own.
    pub(crate) force: bool,
    /// `propagationPolicy` of a delete.
    pub(crate) propagation_policy: Option<String>,
    /// `labelSelector` (empty: every object).
    pub(crate) label_selector: String,
    /// `fieldSelector` (empty: every object).
    pub(crate) field_selector: String,
    /// `shardSelector` (KEP-5866; empty: every object).
    pub(crate) shard_selector: String,
    /// `resourceVersion`, when not empty.
    pub(crate) resource_version: Option<String>,
    /// `resourceVersionMatch`, when not empty.
    pub(crate) resource_version_match: Option<String>,
    /// `limit`, when a positive integer.
    pub(crate) limit: Option<usize>,
    /// `continue`, when not empty.
    pub(crate) continue_token: Option<String>,
    /// `allowWatchBookmarks`.
    pub(crate) allow_watch_bookmarks: bool,
    /// `sendInitialEvents`: a streaming list.
    pub(crate) send_initial_events: bool,
    /// `timeoutSeconds`, when a positive integer.
    pub(crate) timeout: Option<Duration>,
    /// `includeObject` of a table's rows.
    pub(crate) include_object: Include,
}

impl Options {
    /// The options of a query (its parameters, decoded).
    pub(crate) fn parse(query: &HashMap<String, String>) -> Self {
        let text = |name: &str| query.get(name).cloned();
        let not_empty = |name: &str| query.get(name).filter(|v| !v.is_empty()).cloned();
        let flag = |name: &str| query.get(name).is_some_and(|v| v == "true" || v == "1");
        let positive = |name: &str| query.get(name)?.parse::<u64>().ok().filter(|n| *n > 0);
        Options {
            watch: flag("watch"),
            dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
            field_manager: text("fieldManager"),
            field_validation: text("fieldValidation"),
            force: flag("force"),
            propagation_policy: text("propagationPolicy"),
            label_selector: text("labelSelector").unwrap_or_default(),
            field_selector: text("fieldSelector").unwrap_or_default(),
            shard_selector: text("shardSelector").unwrap_or_default(),
            resource_version: not_empty("resourceVersion"),
            resource_version_match: not_empty("resourceVersionMatch"),
            limit: positive("limit").and_then(|n| usize::try_from(n).ok()),
            continue_token: not_empty("continue"),
            allow_watch_bookmarks: flag("allowWatchBookmarks"),
            send_initial_events: flag("sendInitialEvents"),
            timeout: positive("timeoutSeconds").map(Duration::from_secs),
            include_object: Include::parse(query.get("includeObject").map(String::as_str)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Options {
        Options::parse(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn flags_are_true_or_1_and_dry_runs_all() {
        let o = options(&[("watch", "1"), ("force", "true"), ("dryRun", "All")]);
        assert!(o.watch && o.force && o.dry_run);
        let o = options(&[("watch", "yes"), ("force", "false"), ("dryRun", "all")]);
        assert!(!o.watch && !o.force && !o.dry_run);
    }

    #[test]
    fn numbers_that_are_not_positive_integers_are_no_limit() {
        let o = options(&[("limit", "10"), ("timeoutSeconds", "30")]);
        assert_eq!((o.limit, o.timeout), (Some(10), Some(Duration::from_secs(30))));
        for bad in ["0", "-1", "ten", ""] {
            let o = options(&[("limit", bad), ("timeoutSeconds", bad)]);
            assert_eq!((o.limit, o.timeout), (None, None), "{bad:?}");
        }
    }

    #[test]
    fn empty_versions_and_tokens_are_unset_and_text_is_kept_as_sent() {
        let o = options(&[("resourceVersion", ""), ("continue", ""), ("fieldManager", "")]);
        assert_eq!((o.resource_version, o.continue_token), (None, None));
        assert_eq!(o.field_manager.as_deref(), Some(""), "an apply refuses it by name");
        let o = options(&[("fieldValidation", "Sloppy"), ("labelSelector", "app=web")]);
        assert_eq!(o.field_validation.as_deref(), Some("Sloppy"), "a write's 422 names it");
        assert_eq!(o.label_selector, "app=web");
    }
}
