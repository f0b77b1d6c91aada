//! [`InformerConfig`]: the settings of an informer that do not depend on its kind, which a
//! factory gives every informer it makes and an [`InformerBuilder`](super::InformerBuilder)'s
//! setters change one by one.

use std::time::Duration;

use super::backoff::BackoffConfig;
use super::wire::WireFormat;

/// The settings of an informer that do not depend on its kind: what an
/// [`InformerBuilder`](super::InformerBuilder) starts from and what a
/// [`SharedInformerFactory`](super::SharedInformerFactory) gives every informer it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerConfig {
    /// Replays every cached object to the handlers as an update every period (client-go's
    /// resync). Default: off.
    pub resync: Option<Duration>,
    /// The wait after list and watch failures (default: 800 ms doubling to 30 s, reset after
    /// 2 minutes).
    pub backoff: BackoffConfig,
    /// Builds the cache from a streaming list (a watch with `sendInitialEvents`) instead of a
    /// paginated list, falling back to list + watch where the server does not support it.
    /// Default: on, as client-go's since 1.35; see
    /// [`InformerBuilder::streaming_list`](super::InformerBuilder::streaming_list).
    pub streaming_list: bool,
    /// Keeps `metadata.managedFields` in cached objects. Default: dropped; see
    /// [`InformerBuilder::keep_managed_fields`](super::InformerBuilder::keep_managed_fields).
    pub keep_managed_fields: bool,
    /// The deepest nesting of objects and arrays an object may have to be cached. Default:
    /// [`DEFAULT_MAX_DEPTH`](super::DEFAULT_MAX_DEPTH); see
    /// [`InformerBuilder::max_depth`](super::InformerBuilder::max_depth).
    pub max_depth: usize,
    /// The encoding of lists, watches and gets. Default: [`WireFormat::default`]; see
    /// [`InformerBuilder::wire_format`](super::InformerBuilder::wire_format).
    pub wire_format: WireFormat,
}

impl Default for InformerConfig {
    fn default() -> Self {
        Self {
            resync: None,
            backoff: BackoffConfig::default(),
            streaming_list: true,
            keep_managed_fields: false,
            max_depth: super::DEFAULT_MAX_DEPTH,
            wire_format: WireFormat::default(),
        }
    }
}
