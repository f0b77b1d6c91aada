//! [`InformerBuilder`]: everything about an [`Informer`] is set here before it is built: its
//! [`InformerConfig`] (one setter per setting), its store, transform, metrics and watch error
//! handler, and the span it logs in.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use super::backoff::BackoffConfig;
use super::informer::Informer;
use super::informer_config::InformerConfig;
use super::informer_error::InformerError;
use super::metrics::{InformerLabels, InformerMetricsProvider};
use super::object::prepare::{Prepare, Transform};
use super::reflector::{Reflector, ReflectorConfig, WatchErrorHandler};
use super::wire::WireFormat;
use super::{Indexer, InformerObject, ListWatch};

/// Builds an [`Informer`]: [`Informer::builder`] starts from the default settings,
/// [`Informer::builder_with`] from an [`InformerConfig`] (what a factory hands its
/// informers); each setter changes one setting of it.
pub struct InformerBuilder<K> {
    list_watch: ListWatch<K>,
    indexer: Option<Indexer<K>>,
    config: InformerConfig,
    transform: Option<Transform<K>>,
    metrics: Option<Arc<dyn InformerMetricsProvider>>,
    error_handler: Option<WatchErrorHandler>,
}

impl<K> Debug for InformerBuilder<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerBuilder")
            .field("list_watch", &self.list_watch)
            .field("config", &self.config)
            .field("transform", &self.transform.is_some())
            .finish_non_exhaustive()
    }
}

impl<K: InformerObject> Informer<K> {
    /// An informer with default settings (no resync, no transform, list + watch).
    pub fn new(list_watch: ListWatch<K>) -> Self {
        Self::builder(list_watch).build()
    }

    /// A builder for resync, transform, backoff, streaming lists and a custom indexer,
    /// starting from the default settings.
    pub fn builder(list_watch: ListWatch<K>) -> InformerBuilder<K> {
        Self::builder_with(list_watch, InformerConfig::default())
    }

    /// A builder starting from `config` (what a
    /// [`SharedInformerFactory`](super::SharedInformerFactory) hands its informers); its
    /// setters change that.
    pub fn builder_with(list_watch: ListWatch<K>, config: InformerConfig) -> InformerBuilder<K> {
        InformerBuilder {
            list_watch,
            indexer: None,
            config,
            transform: None,
            metrics: None,
            error_handler: None,
        }
    }
}

impl<K: InformerObject> InformerBuilder<K> {
    /// Replays every cached object to the handlers as an update every `period` (client-go's
    /// resync). Off by default.
    #[must_use]
    pub fn resync(mut self, period: Duration) -> Self {
        self.config.resync = Some(period).filter(|p| !p.is_zero());
        self
    }

    /// Keeps `metadata.managedFields` in cached objects. By default the informer drops them
    /// before storing: decoded, they are half of a typical pod's memory and controllers
    /// rarely read them (client-go keeps them; controller-runtime users strip them with a
    /// cache transform).
    #[must_use]
    pub fn keep_managed_fields(mut self, keep: bool) -> Self {
        self.config.keep_managed_fields = keep;
        self
    }

    /// Caches objects nested up to `levels` deep (objects and arrays; default
    /// [`DEFAULT_MAX_DEPTH`](super::DEFAULT_MAX_DEPTH), 512, at least 128). kube-apiserver
    /// serves objects up to 10,000 levels deep, but a `clone`, `==`, serialization or drop
    /// of one that deep overflows a tokio worker's 2 MiB stack and aborts the process. A
    /// deeper object is skipped, named in an error log and counted
    /// (`InformerMetrics::object_skipped`); an object the cache holds keeps its last copy
    /// within the limit, on a watch event and on a relist alike, and is never reported
    /// deleted for its depth; a delete whose final state is too deep removes it and tells
    /// handlers of the delete with that last copy. Raise it only with the runtime's stack
    /// (`thread_stack_size`).
    #[must_use]
    pub fn max_depth(mut self, levels: usize) -> Self {
        self.config.max_depth = levels;
        self
    }

    /// Runs `f` on every object before it is stored (after `managedFields` are dropped). A
    /// panic in `f` fails the list or watch that brought the object, which is retried with
    /// backoff; the object is never skipped.
    #[must_use]
    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }

    /// Backoff after failures (default: 800 ms doubling to 30 s, reset after 2 minutes).
    #[must_use]
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// Whether to build the cache from a streaming list (a watch with `sendInitialEvents`,
    /// Kubernetes 1.27 and later) instead of a paginated list. Default: on, as client-go's
    /// since 1.35.
    ///
    /// A server that refuses streaming lists, or ends one without its initial-events-end
    /// bookmark, or sends nothing for 60 s before that bookmark, is listed instead, with one warning; streaming is tried
    /// again at the next relist a 410 forces. Off, every relist is a paginated list (whose
    /// page size [`ListWatch::page_size`](super::ListWatch::page_size) sets).
    #[must_use]
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.config.streaming_list = on;
        self
    }

    /// The encoding the informer's lists and watches ask for: with [`WireFormat::Protobuf`],
    /// protobuf first and JSON second for built-in kinds and metadata-only informers, as
    /// client-go's generated clients ask; custom resources are read as JSON either way.
    /// Default: [`WireFormat::default`], which the environment variable
    /// [`WIRE_FORMAT_ENV`](super::WIRE_FORMAT_ENV) sets for the whole process.
    #[must_use]
    pub fn wire_format(mut self, format: WireFormat) -> Self {
        self.config.wire_format = format;
        self
    }

    /// Calls `handler` with each failure of the informer's list or watch (a refused request,
    /// a broken stream, an `ERROR` event with its `Status`, an undecodable answer), before the
    /// informer backs off and tries again: client-go's `SetWatchErrorHandler`. The handler
    /// replaces the default, a warning in the log; a panic in it is logged and the informer
    /// goes on. A 410 Expired is not a failure (the informer relists) and is not reported.
    #[must_use]
    pub fn watch_error_handler(
        mut self,
        handler: impl Fn(&InformerError) + Send + Sync + 'static,
    ) -> Self {
        self.error_handler = Some(Arc::new(handler));
        self
    }

    /// Reports the informer's requests, events and store size to `provider`.
    #[must_use]
    pub fn metrics(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// Uses `indexer` as the store: for indexes added before the informer is built, or for a
    /// compact store ([`Indexer::compact`]: objects kept as JSON, decoded on every read).
    #[must_use]
    pub fn indexer(mut self, indexer: Indexer<K>) -> Self {
        self.indexer = Some(indexer);
        self
    }

    /// The informer.
    pub fn build(self) -> Informer<K> {
        let config = self.config;
        let span = informer_span(&self.list_watch);
        let metrics =
            self.metrics.map(|p| p.new_informer_metrics(&InformerLabels::of(&self.list_watch)));
        let indexer = self.indexer.unwrap_or_default();
        let reflector = Reflector::new(
            self.list_watch,
            ReflectorConfig {
                prepare: Prepare {
                    keep_managed_fields: config.keep_managed_fields,
                    transform: self.transform,
                    codec: indexer.codec(),
                    max_depth: config.max_depth,
                },
                backoff: config.backoff,
                streaming_list: config.streaming_list,
                wire_format: config.wire_format,
                metrics: metrics.clone(),
                error_handler: self.error_handler,
            },
        );
        Informer::assemble(reflector, indexer, config.resync, span, metrics)
    }
}

/// The span an informer logs in: `informer{kind=Pod namespace=default labels=app=web}`, the
/// kind qualified by its group unless core (`ConfigMapSet.ctrlkit.example.com`), `*` for all
/// namespaces, selectors only when set, `metadata_only` only when true.
fn informer_span<K>(lw: &ListWatch<K>) -> tracing::Span {
    let resource = lw.api_resource();
    let kind = match resource.group.as_str() {
        "" => resource.kind.clone(),
        group => format!("{}.{group}", resource.kind),
    };
    let span = tracing::info_span!(
        "informer",
        kind = %kind,
        namespace = %lw.namespace().unwrap_or("*"),
        labels = tracing::field::Empty,
        fields = tracing::field::Empty,
        metadata_only = tracing::field::Empty,
    );
    if let Some(labels) = lw.label_selector() {
        span.record("labels", tracing::field::display(labels));
    }
    if let Some(fields) = lw.field_selector() {
        span.record("fields", tracing::field::display(fields));
    }
    if lw.metadata_only() {
        span.record("metadata_only", true);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::list_watch::offline_configmaps;

    /// A setter changes the one setting it names of the config the builder started from;
    /// what no setter touched comes from that config.
    #[tokio::test]
    async fn setters_change_the_config_the_builder_started_from() {
        let base = InformerConfig {
            resync: Some(Duration::from_secs(60)),
            streaming_list: true,
            max_depth: 200,
            ..InformerConfig::default()
        };
        let builder = Informer::builder_with(offline_configmaps(), base).streaming_list(false);
        assert!(!builder.config.streaming_list);
        assert_eq!(builder.config.resync, Some(Duration::from_secs(60)));
        assert_eq!(builder.config.max_depth, 200);
        let builder = builder.resync(Duration::ZERO);
        assert_eq!(builder.config.resync, None, "a zero period turns resync off");
    }
}
