//! [`ListWatch`]: how an informer lists and watches one kind, over `kube_client::Api<K>`.

use std::fmt::Debug;

use futures::Stream;
use kube_client::api::{ListParams, WatchEvent, WatchParams};
use kube_client::{Api, Resource};
use serde::de::DeserializeOwned;

/// The list and watch requests of one informer: an `Api<K>` (namespaced or not), optional
/// label and field selectors, and the page size of lists. Works for typed objects and
/// `DynamicObject` alike.
#[derive(Clone)]
pub struct ListWatch<K> {
    api: Api<K>,
    client: kube_client::Client,
    label_selector: Option<String>,
    field_selector: Option<String>,
    page_size: u32,
}

impl<K> Debug for ListWatch<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListWatch")
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl<K> ListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Lists and watches everything `api` reaches, in pages of 500 (client-go's default).
    pub fn new(api: Api<K>) -> Self {
        let client = api.clone().into_client();
        Self { api, client, label_selector: None, field_selector: None, page_size: 500 }
    }

    /// Only objects matching a label selector (`app=web,tier!=db`).
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Only objects matching a field selector (`metadata.name=web-0`).
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }

    /// Objects per list page; 0 lists everything in one response.
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
    pub(crate) async fn list_page_text(
        &self,
        continue_token: Option<&str>,
        paginate: bool,
    ) -> kube_client::Result<String> {
        let mut lp = self.list_params();
        if paginate && self.page_size > 0 {
            lp = lp.limit(self.page_size);
        }
        if let Some(token) = continue_token {
            lp = lp.continue_token(token);
        }
        let request = kube_client::core::Request::new(self.api.resource_url())
            .list(&lp)
            .map_err(kube_client::Error::BuildRequest)?;
        self.client.request_text(request).await
    }

    /// A watch from `resource_version` that the server ends after `timeout_seconds`.
    pub(crate) async fn watch(
        &self,
        resource_version: &str,
        timeout_seconds: u32,
        streaming_list: bool,
    ) -> kube_client::Result<impl Stream<Item = kube_client::Result<WatchEvent<K>>> + Send + use<K>>
    {
        let mut wp =
            if streaming_list { WatchParams::streaming_lists() } else { WatchParams::default() };
        wp.bookmarks = true;
        wp.label_selector = self.label_selector.clone();
        wp.field_selector = self.field_selector.clone();
        wp.timeout = Some(timeout_seconds);
        self.api.watch(&wp, resource_version).await
    }
}
