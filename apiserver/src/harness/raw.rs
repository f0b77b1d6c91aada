//! Requests sent and answered as they are: no retries of 429/503/504 and no parameters
//! dropped, as kube-client's typed calls would, for cases that check the protocol itself.

use std::time::Duration;

use http_body_util::BodyExt;
use kube_client::Client;

use super::target::Target;

impl Target {
    /// A GET of `path` as the server answered it: no retries of 429/503/504 and no
    /// parameters dropped, as kube-client's typed calls would.
    pub async fn raw_get(&self, path: &str) -> RawResponse {
        self.raw_get_with(path, &[]).await
    }

    /// As [`raw_get`](Self::raw_get), with request headers (`Accept`, say).
    pub async fn raw_get_with(&self, path: &str, headers: &[(&str, &str)]) -> RawResponse {
        self.raw_request(http::Method::GET, path, headers, Vec::new()).await
    }

    /// Any request, sent and answered as it is (no retries).
    pub async fn raw_request(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> RawResponse {
        self.try_raw_request(method, path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("the request reaches the server: {e}"))
    }

    /// As [`raw_request`](Self::raw_request), for a request the server may leave unanswered
    /// (closing the connection): the client's error then.
    pub async fn try_raw_request(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<RawResponse, kube_client::Error> {
        let mut config = self.config.clone();
        config.default_retry = false;
        let client = Client::try_from(config).expect("a client");
        let mut request = http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.into()).expect("a valid request path");
        let response = tokio::time::timeout(Duration::from_secs(30), client.send(request))
            .await
            .expect("an answer within 30 s")?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let bytes = response.into_body().collect().await.expect("the whole body").to_bytes();
        Ok(RawResponse {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
            bytes: bytes.to_vec(),
        })
    }
}

/// A response as the server sent it.
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names as sent, values as text (empty where they are not).
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy where it is not UTF-8).
    pub body: String,
    /// The body's bytes.
    pub bytes: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}
