//! [`ListWatch`]: what one informer lists and watches: a kind, a namespace (or all), label and
//! field selectors, and the page size of lists. Its requests go through kube-client, so they
//! carry the client's authentication, timeouts and retries.
//!
//! A `ListWatch` of [`PartialObjectMeta<K>`](kube_client::core::PartialObjectMeta) lists and
//! watches metadata only: its requests ask for
//! `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` (lists) and
//! `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (watches), so the server
//! sends each object's `metadata` and nothing else.
//!
//! A shard selector (Kubernetes 1.36's `shardSelector`, alpha behind `ShardedListAndWatch`:
//! `shardRange(object.metadata.uid,'0x…','0x…')`, see [`ListWatch::shards`]) is sent on
//! every list and watch. A sharded controller's selector changes as its ring does: the
//! informer then lists again under the new one, and while the selector selects nothing its
//! cache is empty and nothing is requested. Servers without the feature ignore the parameter
//! and send every object.

use std::fmt;
use std::marker::PhantomData;

use kube_client::api::{ApiResource, ListParams, WatchParams};
use kube_client::core::{
    ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope, Request, SubResourceScope,
};
use kube_client::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::wire::{self, Answer, Body, Encoding, Read, WireFormat};

/// The bound of every object an informer can cache: a kube `Resource` whose scope is one of
/// k8s-openapi's or kube's (see [`KindScope`]), decodable and encodable (the store keeps most
/// objects as their JSON), cloneable and shareable.
pub trait InformerObject:
    Resource<Scope: KindScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
}
impl<K> InformerObject for K where
    K: Resource<Scope: KindScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// Whether a kind lives in namespaces, as its type tells: `Some(true)` for namespaced kinds,
/// `Some(false)` for cluster-scoped ones, `None` where only the run time knows
/// (`DynamicObject`). Implemented for every scope type of k8s-openapi and kube.
pub trait KindScope {
    /// The scope, when the type knows it.
    const NAMESPACED: Option<bool>;
}

impl KindScope for NamespaceResourceScope {
    const NAMESPACED: Option<bool> = Some(true);
}
impl KindScope for ClusterResourceScope {
    const NAMESPACED: Option<bool> = Some(false);
}
impl KindScope for DynamicResourceScope {
    const NAMESPACED: Option<bool> = None;
}
impl KindScope for SubResourceScope {
    const NAMESPACED: Option<bool> = None;
}

/// The list and watch requests of one informer; see the module docs.
pub struct ListWatch<K> {
    client: Client,
    /// The collection's path: `/api/v1/namespaces/default/pods`, `/apis/apps/v1/deployments`.
    url: String,
    namespace: Option<String>,
    resource: ApiResource,
    namespaced: Option<bool>,
    metadata_only: bool,
    label_selector: Option<String>,
    field_selector: Option<String>,
    shards: Option<ShardSelector>,
    page_size: u32,
    _kind: PhantomData<fn() -> K>,
}

/// One list page as the server sent it, undecoded, and how it is encoded.
pub(crate) struct Page {
    pub(crate) encoding: Encoding,
    pub(crate) bytes: bytes::Bytes,
}

/// A shard selector that may change: its current text (`None`: select nothing), and a name
/// that tells one selector from another (for logs and for sharing informers).
#[derive(Clone)]
pub(crate) struct ShardSelector {
    pub(crate) name: String,
    pub(crate) current: watch::Receiver<Option<String>>,
}

impl<K> Clone for ListWatch<K> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            url: self.url.clone(),
            namespace: self.namespace.clone(),
            resource: self.resource.clone(),
            namespaced: self.namespaced,
            metadata_only: self.metadata_only,
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            shards: self.shards.clone(),
            page_size: self.page_size,
            _kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for ListWatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListWatch")
            .field("url", &self.url)
            .field("metadata_only", &self.metadata_only)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("shards", &self.shards.as_ref().map(|s| &s.name))
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// Names what is listed and watched, for logs and errors: `pods in namespace default with
/// labels app=web`, `configmapsets.ctrlkit.example.com (metadata only) in all namespaces`.
impl<K> fmt::Display for ListWatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource.plural)?;
        if !self.resource.group.is_empty() {
            write!(f, ".{}", self.resource.group)?;
        }
        if self.metadata_only {
            f.write_str(" (metadata only)")?;
        }
        match (&self.namespace, self.namespaced) {
            (Some(ns), _) => write!(f, " in namespace {ns}")?,
            (None, Some(false)) => {}
            (None, _) => f.write_str(" in all namespaces")?,
        }
        if let Some(labels) = &self.label_selector {
            write!(f, " with labels {labels}")?;
        }
        if let Some(fields) = &self.field_selector {
            write!(f, " with fields {fields}")?;
        }
        if let Some(shards) = &self.shards {
            write!(f, " in {}", shards.name)?;
        }
        Ok(())
    }
}

/// What is listed and watched; these need nothing of `K`.
impl<K> ListWatch<K> {
    /// The client the requests go through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The collection's URL path.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The namespace listed, or `None` for all namespaces (or a cluster-scoped kind).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The kind's group, version, kind and plural.
    pub fn api_resource(&self) -> &ApiResource {
        &self.resource
    }

    /// Whether the kind is namespaced, where known (see [`KindScope`]).
    pub fn namespaced(&self) -> Option<bool> {
        self.namespaced
    }

    /// Whether only metadata is listed and watched (`K` is a `PartialObjectMeta`).
    pub fn metadata_only(&self) -> bool {
        self.metadata_only
    }

    /// The label selector, if any.
    pub fn label_selector(&self) -> Option<&str> {
        self.label_selector.as_deref()
    }

    /// The field selector, if any.
    pub fn field_selector(&self) -> Option<&str> {
        self.field_selector.as_deref()
    }

    /// The shard selector now, if any (`Some("")` while a changing one selects nothing).
    pub fn shard_selector(&self) -> Option<String> {
        let shards = self.shards.as_ref()?;
        Some(shards.current.borrow().clone().unwrap_or_default())
    }

    /// The name of the shard selector (its text, or what a changing one stands for).
    pub(crate) fn shard_selector_name(&self) -> Option<&str> {
        self.shards.as_ref().map(|s| s.name.as_str())
    }

    /// The changing shard selector, to follow.
    pub(crate) fn shard_selector_changes(&self) -> Option<watch::Receiver<Option<String>>> {
        self.shards.as_ref().map(|s| s.current.clone())
    }
}

impl<K> From<Api<K>> for ListWatch<K>
where
    K: Resource<Scope: KindScope> + Clone + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default,
{
    fn from(api: Api<K>) -> Self {
        Self::new(api)
    }
}

impl<K> ListWatch<K>
where
    K: Resource<Scope: KindScope> + Clone + DeserializeOwned + Send + Sync + 'static,
{
    /// Lists and watches everything `api` reaches (its namespace, or all), in pages of 500
    /// (client-go's default).
    pub fn new(api: Api<K>) -> Self
    where
        K::DynamicType: Default,
    {
        Self::new_with(api, &K::DynamicType::default())
    }

    /// As [`new`](Self::new), for kinds known at run time (`DynamicObject` with its
    /// `ApiResource`).
    pub fn new_with(api: Api<K>, dyntype: &K::DynamicType) -> Self {
        let namespace = api.namespace().map(str::to_owned);
        let url = api.resource_url().to_owned();
        // A dynamic kind reached through a namespace is namespaced; reached across all
        // namespaces, it may be either.
        let namespaced = K::Scope::NAMESPACED.or(namespace.as_ref().map(|_| true));
        Self::from_parts(api.into_client(), url, namespace, namespaced, dyntype)
    }

    /// The objects of `K` in `namespace` (when `K` is namespaced) or everywhere.
    pub(crate) fn for_client(
        client: Client,
        dyntype: &K::DynamicType,
        namespace: Option<&str>,
        namespaced: Option<bool>,
    ) -> Self {
        let namespace = namespace.filter(|_| namespaced == Some(true));
        let url = K::url_path(dyntype, namespace);
        Self::from_parts(client, url, namespace.map(str::to_owned), namespaced, dyntype)
    }

    fn from_parts(
        client: Client,
        url: String,
        namespace: Option<String>,
        namespaced: Option<bool>,
        dyntype: &K::DynamicType,
    ) -> Self {
        Self {
            client: crate::user_agent::with_default(client),
            url,
            namespace,
            resource: ApiResource::erase::<K>(dyntype),
            namespaced,
            metadata_only: K::metadata_api(),
            label_selector: None,
            field_selector: None,
            shards: None,
            page_size: 500,
            _kind: PhantomData,
        }
    }

    /// The same requests, counted in `layer` (a Manager's request layer).
    pub(crate) fn instrumented(mut self, layer: &crate::rest_client::RequestLayer) -> Self {
        self.client = crate::rest_client::instrument(self.client, layer);
        self
    }

    /// Only objects matching a label selector (`app=web,tier!=db`).
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned()).filter(|s| !s.is_empty());
        self
    }

    /// Only objects matching a field selector (`metadata.name=web-0`).
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned()).filter(|s| !s.is_empty());
        self
    }

    /// Only objects a server-side shard selector selects:
    /// `shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')`, several
    /// joined by `||` (Kubernetes 1.36 with `ShardedListAndWatch` on; older servers ignore
    /// it). [`HashRanges::selector`](crate::sharding::HashRanges::selector) writes one.
    #[must_use]
    pub fn shards(mut self, selector: &str) -> Self {
        self.shards = Some(selector.to_owned()).filter(|s| !s.is_empty()).map(|text| {
            let (_, current) = watch::channel(Some(text.clone()));
            ShardSelector { name: format!("shards {text}"), current }
        });
        self
    }

    /// Follows a shard selector that changes (`None`: nothing selected), known as `name`.
    #[must_use]
    pub(crate) fn shards_from(
        mut self,
        name: String,
        current: watch::Receiver<Option<String>>,
    ) -> Self {
        self.shards = Some(ShardSelector { name, current });
        self
    }

    /// Objects per list page; 0 lists everything in one response.
    #[must_use]
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size;
        self
    }

    fn list_params(&self) -> ListParams {
        ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            ..ListParams::default()
        }
    }

    /// One page of a consistent, most-recent list as the server sent it, undecoded, so that
    /// decoding can run beside the next page's request.
    pub(crate) async fn list_page(
        &self,
        continue_token: Option<&str>,
        paginate: bool,
        format: WireFormat,
    ) -> kube_client::Result<Page> {
        let mut lp = self.list_params();
        if paginate && self.page_size > 0 {
            lp = lp.limit(self.page_size);
        }
        if let Some(token) = continue_token {
            lp = lp.continue_token(token);
        }
        let request = Request::new(&self.url);
        let mut request =
            if self.metadata_only { request.list_metadata(&lp) } else { request.list(&lp) }
                .map_err(kube_client::Error::BuildRequest)?;
        self.add_shard_selector(&mut request)?;
        let read = if self.metadata_only { Read::MetadataList } else { Read::Objects };
        self.ask_protobuf(&mut request, read, format);
        let answer = wire::send(&self.client, request).await?;
        Ok(Page { encoding: answer.encoding, bytes: answer.bytes().await? })
    }

    /// A watch from `resource_version` that the server ends after `timeout_seconds`: its body,
    /// read line by line (see the `watch_stream` module).
    pub(crate) async fn watch(
        &self,
        resource_version: &str,
        timeout_seconds: u32,
        streaming_list: bool,
        format: WireFormat,
    ) -> kube_client::Result<(Encoding, Body)> {
        let mut wp =
            if streaming_list { WatchParams::streaming_lists() } else { WatchParams::default() };
        wp.bookmarks = true;
        wp.label_selector = self.label_selector.clone();
        wp.field_selector = self.field_selector.clone();
        wp.timeout = Some(timeout_seconds);
        let request = Request::new(&self.url);
        let mut request = if self.metadata_only {
            request.watch_metadata(&wp, resource_version)
        } else {
            request.watch(&wp, resource_version)
        }
        .map_err(kube_client::Error::BuildRequest)?;
        self.add_shard_selector(&mut request)?;
        // kube-client marks watches so that its read timeout does not cut them.
        request.extensions_mut().insert("watch");
        // As kube-client's own watches: servers from 1.37 gzip a watch one member per event,
        // which the client's decompression reads only the first of.
        let identity = "identity".parse().expect("a valid header value");
        request.headers_mut().insert("accept-encoding", identity);
        let read = if self.metadata_only { Read::Metadata } else { Read::Objects };
        self.ask_protobuf(&mut request, read, format);
        let answer: Answer = wire::send(&self.client, request).await?;
        Ok((answer.encoding, answer.stream()))
    }
}

impl<K> ListWatch<K> {
    /// Asks for protobuf first where `format` and the kind allow it (see [`WireFormat`]).
    fn ask_protobuf<B>(&self, request: &mut http::Request<B>, read: Read, format: WireFormat) {
        let (api_version, kind) = (&self.resource.api_version, &self.resource.kind);
        if let Some(accept) = wire::accept_for(api_version, kind, read, format) {
            let accept = http::HeaderValue::from_static(accept);
            request.headers_mut().insert(http::header::ACCEPT, accept);
        }
    }

    /// Adds the shard selector now, if any, to a list or watch request (kube-client's
    /// parameters have no field for it).
    fn add_shard_selector<B>(&self, request: &mut http::Request<B>) -> kube_client::Result<()> {
        let Some(selector) = self.shards.as_ref().and_then(|s| s.current.borrow().clone()) else {
            return Ok(());
        };
        let uri = request.uri().to_string();
        let joiner = if uri.contains('?') { '&' } else { '?' };
        let uri = format!("{uri}{joiner}{}", shard_selector_param(&selector));
        *request.uri_mut() = uri.parse().map_err(|e: http::uri::InvalidUri| {
            kube_client::Error::BuildRequest(kube_client::core::request::Error::Validation(
                e.to_string(),
            ))
        })?;
        Ok(())
    }
}

/// The query parameter of a shard selector: `shardSelector=<selector, URL-encoded>`.
pub(crate) fn shard_selector_param(selector: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(selector.as_bytes()).collect();
    format!("shardSelector={encoded}")
}

/// ConfigMaps of every namespace, through a client of a server that is not there: for unit
/// tests that build informers they never run (building one needs a tokio runtime).
#[cfg(test)]
pub(crate) fn offline_configmaps() -> ListWatch<k8s_openapi::api::core::v1::ConfigMap> {
    let config = kube_client::Config::new("http://127.0.0.1:9".parse().expect("a valid URL"));
    let client = Client::try_from(config).expect("a client needs no server to be made");
    Api::all(client).into()
}

#[cfg(test)]
mod tests {
    use kube_client::api::{ApiResource, DynamicObject, GroupVersionKind};
    use kube_client::core::PartialObjectMeta;

    use super::*;

    fn accept<K>(list_watch: &ListWatch<K>, read: Read, format: WireFormat) -> Option<String> {
        let mut request = http::Request::new(());
        list_watch.ask_protobuf(&mut request, read, format);
        request.headers().get(http::header::ACCEPT).map(|v| v.to_str().unwrap().to_owned())
    }

    /// Built-in kinds ask for protobuf first; custom resources ask for nothing but their
    /// JSON (no second request), except metadata alone, whose message every kind shares.
    #[tokio::test]
    async fn protobuf_is_asked_for_where_the_answer_can_be_protobuf() {
        let configmaps = offline_configmaps();
        let objects = accept(&configmaps, Read::Objects, WireFormat::Protobuf);
        assert_eq!(
            objects.as_deref(),
            Some("application/vnd.kubernetes.protobuf,application/json")
        );
        assert_eq!(accept(&configmaps, Read::Objects, WireFormat::Json), None);

        let client = configmaps.client().clone();
        let gvk = GroupVersionKind::gvk("ctrlkit.example.com", "v1", "Widget");
        let widgets = ApiResource::from_gvk_with_plural(&gvk, "widgets");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &widgets);
        let custom = ListWatch::new_with(api, &widgets);
        assert_eq!(accept(&custom, Read::Objects, WireFormat::Protobuf), None);
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &widgets);
        let metadata = ListWatch::new_with(api, &widgets);
        let list = accept(&metadata, Read::MetadataList, WireFormat::Protobuf).unwrap();
        assert!(
            list.starts_with("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList")
        );
    }
}
