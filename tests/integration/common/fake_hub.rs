//! A fake Hugging Face Hub on 127.0.0.1 that speaks the parts of the Hub API
//! toolgate uses (`/api/models/…`, `paths-info`, `resolve` with redirects and Range)
//! and serves real GGUF files, with switches for the failures a real Hub or CDN
//! produces: gated (401/403), private, a CDN redirect, a connection cut mid-file, a
//! wrong sha256, no Range support, no `x-linked-etag`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;

/// The token the fake hub accepts for gated and private repositories.
pub const GOOD_TOKEN: &str = "hf_fakehub_GOOD_0123456789abcdef";

/// One file of a fake repository.
#[derive(Clone, Default)]
pub struct FakeFile {
    pub name: String,
    /// Contents; `None` lists the file without serving it.
    pub content: Option<Arc<Vec<u8>>>,
    /// The sha256 advertised (`None`: the real one).
    pub advertised_sha: Option<String>,
    /// Redirect `resolve` to `/cdn/{sha}` like the real Hub's LFS storage.
    pub cdn: bool,
    /// Cut the first full GET after this many bytes.
    pub cut_after: Option<usize>,
    /// Ignore Range headers (always 200 with the whole file).
    pub no_range: bool,
    /// Send no `x-linked-etag` (clients must use paths-info).
    pub no_etag: bool,
}

impl FakeFile {
    pub fn listed(name: &str) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

    pub fn served(name: &str, content: Arc<Vec<u8>>) -> Self {
        Self { name: name.into(), content: Some(content), ..Self::default() }
    }

    fn sha(&self) -> String {
        self.advertised_sha.clone().unwrap_or_else(|| sha256_hex(self.content.as_deref().map_or(&[][..], |v| &v[..])))
    }
}

/// A fake repository.
#[derive(Clone, Default)]
pub struct FakeRepo {
    pub files: Vec<FakeFile>,
    /// `Some("manual")`/`Some("auto")` for gated repositories.
    pub gated: Option<&'static str>,
    pub private: bool,
    /// The `gguf.chat_template` hint of `?expand[]=gguf`.
    pub template_hint: Option<String>,
    /// The commit reported as the listing's `sha` and as `x-repo-commit` (`None`: a
    /// real-looking 40-hex commit). A hostile hub sets paths here.
    pub commit: Option<String>,
}

impl FakeRepo {
    fn commit(&self) -> String {
        self.commit.clone().unwrap_or_else(|| COMMIT.to_string())
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// One request the hub saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct Inner {
    repos: HashMap<String, FakeRepo>,
    log: Mutex<Vec<Seen>>,
    cut_done: Mutex<HashMap<String, bool>>,
    /// Base URL of the "CDN": the same app on a second port, so a different origin.
    cdn_base: Mutex<String>,
}

/// The running fake hub; its runtime (and so the server) stops when dropped.
pub struct FakeHub {
    pub endpoint: String,
    inner: Arc<Inner>,
    _rt: tokio::runtime::Runtime,
}

impl FakeHub {
    pub fn start(repos: HashMap<String, FakeRepo>) -> Self {
        let inner = Arc::new(Inner {
            repos,
            log: Mutex::new(Vec::new()),
            cut_done: Mutex::new(HashMap::new()),
            cdn_base: Mutex::new(String::new()),
        });
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let cdn_listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        *inner.cdn_base.lock().unwrap() = format!("http://{}", cdn_listener.local_addr().unwrap());
        let app = Router::new()
            .route("/api/models/{org}/{name}", get(model_info))
            .route("/api/models/{org}/{name}/revision/{rev}", get(model_info))
            .route("/api/models/{org}/{name}/paths-info/{rev}", post(paths_info))
            .route("/cdn/{sha}", get(cdn))
            .route("/{org}/{name}/resolve/{rev}/{*file}", get(resolve))
            .with_state(inner.clone());
        let cdn_app = app.clone();
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        rt.spawn(async move { axum::serve(cdn_listener, cdn_app).await.unwrap() });
        Self { endpoint, inner, _rt: rt }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.inner.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.inner.log.lock().unwrap().clear();
    }
}

fn record(inner: &Inner, method: &Method, path: String, headers: &HeaderMap) {
    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    inner.log.lock().unwrap().push(Seen {
        method: method.to_string(),
        path,
        range: h("range"),
        authorization: h("authorization"),
    });
}

fn token(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

fn error(status: StatusCode, msg: &str) -> Response<Body> {
    json(status, serde_json::json!({ "error": msg }))
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Access rules of the real Hub: private repos are invisible without the token;
/// gated repos list their files but refuse downloads (401 without a token, 403
/// when the token's user has not accepted the license).
fn access(repo: &FakeRepo, headers: &HeaderMap, download: bool) -> Option<Response<Body>> {
    let t = token(headers);
    if repo.private && t.as_deref() != Some(GOOD_TOKEN) {
        return Some(error(StatusCode::UNAUTHORIZED, "Invalid credentials in Authorization header"));
    }
    if download && repo.gated.is_some() {
        match t.as_deref() {
            None => return Some(error(StatusCode::UNAUTHORIZED, "Access to this model is restricted")),
            Some(GOOD_TOKEN) => {}
            Some(_) => return Some(error(StatusCode::FORBIDDEN, "You must accept the conditions to access it")),
        }
    }
    None
}

/// `/api/models/{org}/{name}` and `…/revision/{rev}` (the revision is not modelled).
async fn model_info(
    State(inner): State<Arc<Inner>>,
    Path(p): Path<HashMap<String, String>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response<Body> {
    info(inner, format!("{}/{}", p["org"], p["name"]), method, uri, headers)
}

fn info(inner: Arc<Inner>, id: String, method: Method, uri: axum::http::Uri, headers: HeaderMap) -> Response<Body> {
    record(&inner, &method, uri.to_string(), &headers);
    let Some(repo) = inner.repos.get(&id) else {
        return error(StatusCode::UNAUTHORIZED, "Repository not found");
    };
    if let Some(r) = access(repo, &headers, false) {
        return r;
    }
    if uri.query().is_some_and(|q| q.contains("gguf")) {
        return json(
            StatusCode::OK,
            serde_json::json!({ "id": id, "gguf": { "architecture": "llama", "chat_template": repo.template_hint } }),
        );
    }
    let siblings: Vec<_> = repo.files.iter().map(|f| serde_json::json!({ "rfilename": f.name })).collect();
    let gated = repo.gated.map(serde_json::Value::from).unwrap_or(serde_json::Value::Bool(false));
    json(
        StatusCode::OK,
        serde_json::json!({ "id": id, "sha": repo.commit(), "private": repo.private, "gated": gated, "siblings": siblings }),
    )
}

async fn paths_info(
    State(inner): State<Arc<Inner>>,
    Path((org, name, _rev)): Path<(String, String, String)>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response<Body> {
    record(&inner, &method, uri.to_string(), &headers);
    let Some(repo) = inner.repos.get(&format!("{org}/{name}")) else {
        return error(StatusCode::NOT_FOUND, "Repository not found");
    };
    let asked: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let out: Vec<_> = repo
        .files
        .iter()
        .filter(|f| asked["paths"].as_array().is_some_and(|a| a.iter().any(|p| p == f.name.as_str())))
        .map(|f| {
            let size = f.content.as_ref().map_or(0, |c| c.len());
            serde_json::json!({ "type": "file", "path": f.name, "size": size, "oid": "0".repeat(40),
                                "lfs": { "oid": f.sha(), "size": size, "pointerSize": 134 } })
        })
        .collect();
    json(StatusCode::OK, serde_json::Value::Array(out))
}

fn parse_range(headers: &HeaderMap, len: usize) -> Option<(usize, usize)> {
    let r = headers.get("range")?.to_str().ok()?.strip_prefix("bytes=")?;
    let (a, b) = r.split_once('-')?;
    let start: usize = a.parse().ok()?;
    let end: usize =
        if b.is_empty() { len.saturating_sub(1) } else { b.parse::<usize>().ok()?.min(len.saturating_sub(1)) };
    Some((start, end))
}

fn serve_bytes(
    inner: &Inner,
    key: &str,
    commit: &str,
    file: &FakeFile,
    method: &Method,
    headers: &HeaderMap,
) -> Response<Body> {
    let Some(content) = file.content.clone() else {
        return error(StatusCode::NOT_FOUND, "file not served by the fake hub");
    };
    let len = content.len();
    let mut builder = Response::builder().header("accept-ranges", "bytes");
    if !file.no_etag {
        builder = builder.header("x-linked-etag", format!("\"{}\"", file.sha())).header("x-linked-size", len);
    }
    builder = builder.header("x-repo-commit", commit).header("etag", "\"0000000000000000000000000000000000000000\"");
    let range = if file.no_range { None } else { parse_range(headers, len) };
    if *method == Method::HEAD {
        return builder.status(StatusCode::OK).header("content-length", len).body(Body::empty()).unwrap();
    }
    if let Some((start, end)) = range {
        if start >= len || start > end {
            return builder.status(StatusCode::RANGE_NOT_SATISFIABLE).body(Body::empty()).unwrap();
        }
        let part = content[start..=end].to_vec();
        return builder
            .status(StatusCode::PARTIAL_CONTENT)
            .header("content-range", format!("bytes {start}-{end}/{len}"))
            .header("content-length", part.len())
            .body(Body::from(part))
            .unwrap();
    }
    if let Some(cut) = file.cut_after {
        let mut done = inner.cut_done.lock().unwrap();
        if !done.get(key).copied().unwrap_or(false) {
            done.insert(key.to_string(), true);
            let head = axum::body::Bytes::copy_from_slice(&content[..cut.min(len)]);
            let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> =
                vec![Ok(head), Err(std::io::Error::other("fake hub: connection cut"))];
            return builder
                .status(StatusCode::OK)
                .header("content-length", len)
                .body(Body::from_stream(futures_util::stream::iter(chunks)))
                .unwrap();
        }
    }
    builder.status(StatusCode::OK).header("content-length", len).body(Body::from(content.to_vec())).unwrap()
}

async fn resolve(
    State(inner): State<Arc<Inner>>,
    Path((org, name, _rev, file)): Path<(String, String, String, String)>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response<Body> {
    record(&inner, &method, uri.path().to_string(), &headers);
    let id = format!("{org}/{name}");
    let Some(repo) = inner.repos.get(&id) else {
        return error(StatusCode::UNAUTHORIZED, "Repository not found");
    };
    if let Some(r) = access(repo, &headers, true) {
        return r;
    }
    let Some(f) = repo.files.iter().find(|f| f.name == file) else {
        return error(StatusCode::NOT_FOUND, "Entry not found");
    };
    if f.cdn {
        // Like the Hub: metadata headers on the redirect, the bytes on another path.
        let base = inner.cdn_base.lock().unwrap().clone();
        let size = f.content.as_ref().map_or(0, |c| c.len());
        return Response::builder()
            .status(StatusCode::FOUND)
            .header("location", format!("{base}/cdn/{}", f.sha()))
            .header("x-linked-etag", format!("\"{}\"", f.sha()))
            .header("x-linked-size", size)
            .header("x-repo-commit", repo.commit())
            .body(Body::empty())
            .unwrap();
    }
    serve_bytes(&inner, &format!("{id}/{file}"), &repo.commit(), f, &method, &headers)
}

async fn cdn(
    State(inner): State<Arc<Inner>>,
    Path(sha): Path<String>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response<Body> {
    record(&inner, &method, uri.path().to_string(), &headers);
    for (id, repo) in &inner.repos {
        if let Some(f) = repo.files.iter().find(|f| f.cdn && f.sha() == sha) {
            return serve_bytes(&inner, &format!("cdn/{id}/{}", f.name), &repo.commit(), f, &method, &headers);
        }
    }
    error(StatusCode::NOT_FOUND, "no such blob")
}
