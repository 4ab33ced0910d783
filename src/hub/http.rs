//! HTTP to the Hub: requests with the token where it belongs, redirects followed by
//! hand (the token is sent to the Hub's own host only, never to a CDN), statuses
//! mapped to [`HubError`], and a `Read + Seek` view of a remote file over HTTP Range
//! requests for reading GGUF headers without the weights.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use ureq::http;

use super::{HubError, Token};

/// How many redirects one request may follow.
const MAX_REDIRECTS: usize = 10;

/// A blocking HTTP client bound to one Hub endpoint.
#[derive(Clone)]
pub(crate) struct Http {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<Token>,
}

/// A response after redirects: the status and headers of the first response (where
/// the Hub puts `x-linked-etag`, `x-repo-commit`…) and the final one.
pub(crate) struct Response {
    pub first_headers: http::HeaderMap,
    pub status: u16,
    pub url: String,
    pub inner: http::Response<ureq::Body>,
}

impl Response {
    /// A header of the first response, else of the final one.
    pub fn header(&self, name: &str) -> Option<String> {
        self.first_headers
            .get(name)
            .or_else(|| self.inner.headers().get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    pub fn final_header(&self, name: &str) -> Option<String> {
        self.inner.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }
}

fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// Where a redirect goes: its `Location` resolved against the URL that was requested
/// (an absolute URL as is, `/path` on the request's origin, `path` beside it).
///
/// Cost: one string.
///
/// ```
/// use toolgate::hub::redirect_target;
/// assert_eq!(redirect_target("https://hf.co/a/b", "/cdn/x"), "https://hf.co/cdn/x");
/// assert_eq!(redirect_target("https://hf.co/a/b", "c"), "https://hf.co/a/c");
/// assert_eq!(redirect_target("https://hf.co/a/b", "http://cdn.example/x"), "http://cdn.example/x");
/// ```
pub fn redirect_target(base: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_string()
    } else if location.starts_with('/') {
        format!("{}{location}", origin(base))
    } else {
        let dir = base.rsplit_once('/').map(|(d, _)| d).unwrap_or(base);
        format!("{dir}/{location}")
    }
}

impl Http {
    pub fn new(endpoint: &str, token: Option<Token>) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Self { agent, endpoint: endpoint.trim_end_matches('/').to_string(), token }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Send `method` to `url` (absolute, or a path on the endpoint), following
    /// redirects. Statuses ≥ 400 are returned, not raised: see [`Http::check`].
    pub fn send(&self, method: &str, url: &str, range: Option<(u64, Option<u64>)>) -> Result<Response, HubError> {
        self.send_inner(method, url, range, None)
    }

    /// [`Http::send`] with a JSON request body.
    pub fn send_body(&self, method: &str, url: &str, body: &[u8]) -> Result<Response, HubError> {
        self.send_inner(method, url, None, Some(body))
    }

    fn send_inner(
        &self,
        method: &str,
        url: &str,
        range: Option<(u64, Option<u64>)>,
        body: Option<&[u8]>,
    ) -> Result<Response, HubError> {
        let mut url = if url.starts_with('/') { format!("{}{url}", self.endpoint) } else { url.to_string() };
        let mut first_headers = None;
        for _ in 0..=MAX_REDIRECTS {
            let mut req = http::Request::builder().method(method).uri(&url);
            if let (Some(token), true) = (&self.token, origin(&url) == origin(&self.endpoint)) {
                req = req.header("authorization", format!("Bearer {}", token.secret()));
            }
            if let Some((start, end)) = range {
                let end = end.map(|e| e.to_string()).unwrap_or_default();
                req = req.header("range", format!("bytes={start}-{end}"));
            }
            let bad = |e: http::Error| HubError::Protocol(format!("bad request URL {url}: {e}"));
            let sent = match body {
                None => self.agent.run(req.body(()).map_err(bad)?),
                Some(b) => {
                    self.agent.run(req.header("content-type", "application/json").body(b.to_vec()).map_err(bad)?)
                }
            };
            let resp = sent.map_err(|e| HubError::Network { url: url.clone(), reason: e.to_string() })?;
            let status = resp.status().as_u16();
            if first_headers.is_none() {
                first_headers = Some(resp.headers().clone());
            }
            if (300..400).contains(&status) && status != 304 {
                let Some(loc) = resp.headers().get("location").and_then(|v| v.to_str().ok()) else {
                    return Err(HubError::Protocol(format!("{url}: redirect {status} without a Location")));
                };
                url = redirect_target(&url, loc);
                continue;
            }
            return Ok(Response { first_headers: first_headers.unwrap_or_default(), status, url, inner: resp });
        }
        Err(HubError::Protocol(format!("{url}: more than {MAX_REDIRECTS} redirects")))
    }

    /// Map an error status to its [`HubError`]; `what` names the thing asked for.
    pub fn check(&self, resp: Response, what: &str) -> Result<Response, HubError> {
        match resp.status {
            200..=299 => Ok(resp),
            401 => Err(HubError::Unauthorized { what: what.to_string(), token_sent: self.has_token() }),
            403 => Err(HubError::Forbidden { what: what.to_string() }),
            404 => Err(HubError::NotFound { what: what.to_string() }),
            status => {
                let mut body = String::new();
                let _ = resp.inner.into_body().into_reader().take(512).read_to_string(&mut body);
                Err(HubError::Http { url: resp.url, status, body: body.trim().to_string() })
            }
        }
    }

    /// GET a JSON document.
    pub fn get_json(&self, url: &str, what: &str) -> Result<serde_json::Value, HubError> {
        let resp = self.check(self.send("GET", url, None)?, what)?;
        let mut text = String::new();
        resp.inner
            .into_body()
            .into_reader()
            .take(64 << 20)
            .read_to_string(&mut text)
            .map_err(|e| HubError::Network { url: url.to_string(), reason: e.to_string() })?;
        serde_json::from_str(&text).map_err(|e| HubError::Protocol(format!("{url}: invalid JSON: {e}")))
    }
}

/// A remote file read through HTTP Range requests, keeping the prefix read so far.
/// Meant for sequential reads from the start (a GGUF header): each miss fetches the
/// next block, doubling from 1 MiB up to 16 MiB, and reading stops at `limit` bytes.
pub(crate) struct RangeReader<'a> {
    http: &'a Http,
    url: String,
    data: Vec<u8>,
    pos: u64,
    size: Option<u64>,
    block: u64,
    limit: u64,
    pub requests: usize,
}

impl<'a> RangeReader<'a> {
    pub fn new(http: &'a Http, url: String, size: Option<u64>, limit: u64) -> Self {
        Self { http, url, data: Vec::new(), pos: 0, size, block: 1 << 20, limit, requests: 0 }
    }

    /// Bytes fetched so far.
    pub fn fetched(&self) -> u64 {
        self.data.len() as u64
    }

    fn fill_to(&mut self, want: u64) -> std::io::Result<()> {
        while (self.data.len() as u64) < want {
            let start = self.data.len() as u64;
            if self.size.is_some_and(|s| start >= s) {
                return Ok(());
            }
            if start >= self.limit {
                return Err(std::io::Error::other(format!(
                    "the header is larger than {} MiB; refusing to read more by range",
                    self.limit >> 20
                )));
            }
            let mut end = start + self.block.max(want - start) - 1;
            if let Some(s) = self.size {
                end = end.min(s - 1);
            }
            self.requests += 1;
            let resp = self.http.send("GET", &self.url, Some((start, Some(end)))).map_err(std::io::Error::other)?;
            let resp = self.http.check(resp, "the file's header").map_err(std::io::Error::other)?;
            if resp.status != 206 {
                return Err(std::io::Error::other(format!(
                    "the server answered {} to a Range request (range requests unsupported)",
                    resp.status
                )));
            }
            let len = end - start + 1;
            let before = self.data.len();
            resp.inner.into_body().into_reader().take(len).read_to_end(&mut self.data)?;
            if self.data.len() == before {
                return Ok(()); // end of file
            }
            self.block = (self.block * 2).min(16 << 20);
        }
        Ok(())
    }
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.fill_to(self.pos + buf.len() as u64)?;
        let start = (self.pos as usize).min(self.data.len());
        let n = buf.len().min(self.data.len() - start);
        buf[..n].copy_from_slice(&self.data[start..start + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RangeReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.size.and_then(|s| s.checked_add_signed(d)),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::other("seek out of range"))?;
        Ok(self.pos)
    }
}
