//! Pull GGUF models from the Hugging Face Hub by repository id, verified before and
//! after download, into a cache laid out like `huggingface_hub`'s.
//!
//! [`Hub::pull`] runs the whole flow; each step fails with its own [`HubError`]:
//!
//! 1. **Resolve** `GET {endpoint}/api/models/{id}[/revision/{rev}]`: files, commit,
//!    `gated` and `private`. A gated or private repository with no token fails here,
//!    before any download.
//! 2. **Pick** the file ([`quant::pick`]): `--file`, else the preferred quantization.
//!    Split models are refused before download (toolgate loads single-file GGUF).
//! 3. **Pre-check** without the weights: the file's GGUF header is read with HTTP
//!    Range requests (a few MB) and its architecture and chat template go through the
//!    same gate as `serve`. A refused model is not downloaded unless `force` is set.
//!    When the header cannot be read, the Hub's `?expand[]=gguf` template hint is
//!    probed instead and the report says so.
//! 4. **Download** resumably into `blobs/{sha256}.incomplete`, check the sha256 the Hub
//!    reports (`x-linked-etag`, else `paths-info`), rename atomically.
//! 5. **Verify** the file as a model (header, tensor extents, tokenizer, architecture,
//!    gate); a failure moves it to quarantine with a `.reason` file.
//!
//! Files: `http.rs` (requests, ranges, redirects), `quant.rs` (the pick), `judge.rs`
//! (the gate before and after download), `download.rs`, `cache.rs` (the
//! `huggingface_hub` layout), `error.rs` ([`HubError`]); this file the client.
//!
//! The token (`HF_TOKEN`, or the token file under `HF_HOME`) is sent as
//! `Authorization: Bearer` to the Hub's own host only, never logged, never written.
//!
//! ```no_run
//! use toolgate::hub::{Hub, HubConfig, PullOptions};
//! let hub = Hub::new(HubConfig::from_env());
//! let pulled = hub.pull("bartowski/SmolLM2-135M-Instruct-GGUF", &PullOptions::default(), &mut ())?;
//! println!("{}", pulled.path.display());
//! # Ok::<(), toolgate::hub::HubError>(())
//! ```

pub mod cache;
mod download;
mod error;
mod http;
mod judge;
pub mod quant;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use cache::{Cache, CachedFile, CachedModel};
pub use download::sha256_file;
pub use error::HubError;
pub use http::redirect_target;
use judge::judge;
pub use judge::{verify_file, GateOptions, Precheck, PrecheckSource, Verdict};

use crate::gguf;
use crate::template::source::GgufTemplates;
use cache::{BlobId, CommitId};
use http::{Http, RangeReader};

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Most bytes of a GGUF header the pre-check reads by range before giving up.
pub const MAX_HEADER_BYTES: u64 = 256 << 20;

/// An access token. Its `Debug` output is redacted and it has no `Display`, so it
/// cannot end up in a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wrap a token (surrounding whitespace is removed).
    pub fn new(token: impl AsRef<str>) -> Option<Self> {
        let t = token.as_ref().trim();
        (!t.is_empty()).then(|| Self(t.to_string()))
    }

    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = env("HF_HOME") {
        return p;
    }
    let cache = env("XDG_CACHE_HOME").unwrap_or_else(|| env("HOME").unwrap_or_else(|| ".".into()).join(".cache"));
    cache.join("huggingface")
}

/// Where to find the Hub and the cache, and how to authenticate.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Base URL of the Hub (or a mirror).
    pub endpoint: String,
    /// The access token, if any.
    pub token: Option<Token>,
    /// The model cache.
    pub cache: Cache,
    /// Use the cache only, never the network.
    pub offline: bool,
    /// Connections tried per download before giving up (each resumes the last).
    pub attempts: u32,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self { endpoint: DEFAULT_ENDPOINT.into(), token: None, cache: Cache::from_env(), offline: false, attempts: 5 }
    }
}

impl HubConfig {
    /// The configuration `huggingface_hub` would use: `HF_ENDPOINT`, `HF_TOKEN` (else
    /// `HUGGING_FACE_HUB_TOKEN`, else the file `HF_TOKEN_PATH` or `HF_HOME/token`),
    /// `HF_HUB_CACHE`/`HF_HOME`, `HF_HUB_OFFLINE`.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let token_file = var("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home().join("token"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(token_file).ok())
            .and_then(Token::new);
        let offline = var("HF_HUB_OFFLINE")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"));
        Self {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.into()),
            token,
            cache: Cache::from_env(),
            offline,
            attempts: 5,
        }
    }
}

/// Receives what a pull is doing: stage messages and download progress.
/// `()` ignores everything.
pub trait Progress {
    /// A one-line stage message ("resolving…", "pre-check passed…").
    fn note(&mut self, _message: &str) {}
    /// A download of `total` bytes starts with `done` already on disk.
    fn start(&mut self, _total: u64, _done: u64) {}
    /// `bytes` more arrived.
    fn advance(&mut self, _bytes: u64) {}
    /// The download finished.
    fn finish(&mut self) {}
}

impl Progress for () {}

/// A repository as the Hub describes it.
#[derive(Debug, Clone, Serialize)]
pub struct RepoInfo {
    /// The repository id.
    pub id: String,
    /// The commit the revision points to.
    pub commit: Option<String>,
    /// `false`, `"manual"` or `"auto"` on the Hub; `None` when not gated.
    pub gated: Option<String>,
    /// Private repository.
    pub private: bool,
    /// Every file path in the repository.
    pub files: Vec<String>,
}

/// Options of [`Hub::pull`].
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Branch, tag or commit (default `main`).
    pub revision: String,
    /// The file to download; `None` picks by quantization.
    pub file: Option<String>,
    /// Download even when the pre-check refuses the model.
    pub force: bool,
    /// How the gate judges the model.
    pub gate: GateOptions,
}

impl Default for PullOptions {
    fn default() -> Self {
        Self { revision: "main".into(), file: None, force: false, gate: GateOptions::default() }
    }
}

/// A pulled model file.
#[derive(Debug, Clone, Serialize)]
pub struct Pulled {
    /// The repository.
    pub repo: String,
    /// The file in the repository.
    pub file: String,
    /// The commit it came from.
    pub commit: String,
    /// Where to load it from (the snapshot entry in the cache).
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Why this file was chosen.
    pub choice: String,
    /// Found in the cache; nothing was downloaded.
    pub from_cache: bool,
    /// The pre-check, when one ran.
    pub precheck: Option<Precheck>,
}

/// Percent-encode one URL path segment (or several, keeping `/` when `keep_slash`).
fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A client for one Hub endpoint and one cache.
#[derive(Clone)]
pub struct Hub {
    config: HubConfig,
    http: Http,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("config", &self.config).finish()
    }
}

impl Hub {
    /// A client. No network access until a method needs it.
    pub fn new(config: HubConfig) -> Self {
        let http = Http::new(&config.endpoint, config.token.clone());
        Self { config, http }
    }

    /// The configuration.
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.config.cache
    }

    /// After `file` of `repo`, pulled to `path`, failed to load with `err`: move it out
    /// of the cache with the reason ([`Cache::quarantine`]), so the next pull downloads
    /// it again instead of loading the same broken file. A file that is sound but holds
    /// a weight type toolgate does not read ([`crate::Error::UnsupportedTensorType`])
    /// stays. Returns where it went.
    ///
    /// Cost: a rename within the cache.
    pub fn quarantine_unloadable(&self, repo: &str, file: &str, path: &Path, err: &crate::Error) -> Option<PathBuf> {
        if matches!(err, crate::Error::UnsupportedTensorType { .. }) {
            return None;
        }
        self.cache().quarantine(repo, file, path, &err.to_string()).ok()
    }

    /// The Hub API path (relative to the endpoint) of `repo`'s metadata at `revision`;
    /// `main` uses the short form, like `huggingface_hub`. Path segments are
    /// percent-encoded (a `/` in a revision such as `refs/pr/1` too).
    ///
    /// Cost: one small string.
    ///
    /// ```
    /// use toolgate::hub::Hub;
    /// assert_eq!(Hub::api_url("org/m", "main"), "/api/models/org/m");
    /// assert_eq!(Hub::api_url("org/m", "refs/pr/1"), "/api/models/org/m/revision/refs%2Fpr%2F1");
    /// ```
    pub fn api_url(repo: &str, revision: &str) -> String {
        if revision == "main" {
            format!("/api/models/{}", encode(repo, true))
        } else {
            format!("/api/models/{}/revision/{}", encode(repo, true), encode(revision, false))
        }
    }

    /// The download path (relative to the endpoint) of `file` in `repo` at `revision`,
    /// percent-encoded as [`Hub::api_url`] (the file's own `/` separators are kept).
    ///
    /// Cost: one small string.
    ///
    /// ```
    /// use toolgate::hub::Hub;
    /// assert_eq!(Hub::resolve_url("org/m", "main", "dir/a b.gguf"), "/org/m/resolve/main/dir/a%20b.gguf");
    /// ```
    pub fn resolve_url(repo: &str, revision: &str, file: &str) -> String {
        format!("/{}/resolve/{}/{}", encode(repo, true), encode(revision, false), encode(file, true))
    }

    /// Step 1: what the Hub says about `repo` at `revision`.
    ///
    /// # Errors
    /// [`HubError::InvalidRepoId`], [`HubError::Unauthorized`] (private, or a repository
    /// that does not exist: the Hub does not tell them apart without a token),
    /// [`HubError::NotFound`], network and protocol errors.
    pub fn repo_info(&self, repo: &str, revision: &str) -> Result<RepoInfo, HubError> {
        cache::check_repo_id(repo)?;
        let what = if revision == "main" { format!("repository {repo}") } else { format!("{repo} at {revision}") };
        let v = self.http.get_json(&Self::api_url(repo, revision), &what)?;
        let files: Vec<String> = v["siblings"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["rfilename"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let gated = match &v["gated"] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Bool(true) => Some("true".into()),
            _ => None,
        };
        Ok(RepoInfo {
            id: v["id"].as_str().unwrap_or(repo).to_string(),
            commit: v["sha"].as_str().map(str::to_string),
            gated,
            private: v["private"].as_bool().unwrap_or(false),
            files,
        })
    }

    /// The file's sha256, size and commit from a `HEAD` on its resolve URL
    /// (`x-linked-etag`, `x-linked-size`, `x-repo-commit`), else `paths-info`.
    /// Every value is checked before it is returned: the oid must be a [`BlobId`],
    /// the commit a [`CommitId`].
    fn file_meta(&self, repo: &str, revision: &str, file: &str) -> Result<(BlobId, u64, Option<CommitId>), HubError> {
        let url = Self::resolve_url(repo, revision, file);
        let resp = self.http.check(self.http.send("HEAD", &url, None)?, &format!("{repo}/{file}"))?;
        let etag = resp.header("x-linked-etag").or_else(|| resp.header("etag")).unwrap_or_default();
        let etag = etag.trim_start_matches("W/").trim_matches('"').to_ascii_lowercase();
        let size = resp
            .header("x-linked-size")
            .or_else(|| resp.final_header("content-length"))
            .and_then(|s| s.parse::<u64>().ok());
        let commit = match resp.header("x-repo-commit") {
            Some(c) => Some(
                CommitId::parse(c.trim())
                    .map_err(|e| HubError::Protocol(format!("{repo}/{file}: x-repo-commit: {e}")))?,
            ),
            None => None,
        };
        if let (Ok(blob), Some(size)) = (BlobId::parse(&etag), size) {
            return Ok((blob, size, commit));
        }
        // paths-info: [{"path", "size", "lfs": {"oid", "size"}}]
        let info_url = format!("/api/models/{}/paths-info/{}", encode(repo, true), encode(revision, false));
        let body = serde_json::json!({ "paths": [file] }).to_string();
        let resp =
            self.http.check(self.http.send_body("POST", &info_url, body.as_bytes())?, &format!("{repo}/{file}"))?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(resp.inner.into_body().into_reader(), 1 << 20),
            &mut text,
        )
        .map_err(|e| HubError::Network { url: info_url.clone(), reason: e.to_string() })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| HubError::Protocol(format!("paths-info: invalid JSON: {e}")))?;
        let entry = v.as_array().and_then(|a| a.iter().find(|e| e["path"] == file));
        let lfs = entry.map(|e| &e["lfs"]);
        match (lfs.and_then(|l| l["oid"].as_str()), lfs.and_then(|l| l["size"].as_u64())) {
            (Some(oid), Some(size)) => {
                let blob = BlobId::parse(oid)
                    .map_err(|e| HubError::Protocol(format!("{repo}/{file}: paths-info lfs.oid: {e}")))?;
                Ok((blob, size, commit))
            }
            _ => Err(HubError::NoChecksum { url: format!("{}{url}", self.http.endpoint()) }),
        }
    }

    /// Step 3: read the file's GGUF header by range requests and judge it; when the
    /// header cannot be read, judge the Hub's `?expand[]=gguf` template hint.
    ///
    /// # Errors
    /// Only when neither the header nor the hint can be had; a refusal is a
    /// [`Verdict`] with `refusal` set, not an error.
    pub fn precheck(
        &self,
        repo: &str,
        revision: &str,
        file: &str,
        size: Option<u64>,
        gate: &GateOptions,
    ) -> Result<Precheck, HubError> {
        let url = Self::resolve_url(repo, revision, file);
        let mut reader = RangeReader::new(&self.http, url, size, MAX_HEADER_BYTES);
        let name = PathBuf::from(format!("{repo}/{file}"));
        let model_id = format!("{repo}/{file}");
        match gguf::read_header(&mut reader, &name) {
            Ok(content) => {
                let meta = &content.metadata;
                let arch = meta.get("general.architecture").and_then(|v| v.to_string().ok()).map(String::as_str);
                // The same template reading as the verification after download.
                let verdict = match GgufTemplates::from_metadata(meta, &name) {
                    Ok(templates) => judge(&model_id, arch, &templates, gate),
                    Err(e) => Verdict {
                        architecture: arch.map(str::to_string),
                        template_source: None,
                        family: None,
                        refusal: Some(e.to_string()),
                    },
                };
                Ok(Precheck {
                    source: PrecheckSource::Header { bytes: reader.fetched(), requests: reader.requests },
                    verdict,
                })
            }
            // A sound file of a weight type toolgate does not read: refused before
            // anything is downloaded.
            Err(e @ crate::Error::UnsupportedTensorType { .. }) => Ok(Precheck {
                source: PrecheckSource::Header { bytes: reader.fetched(), requests: reader.requests },
                verdict: Verdict {
                    architecture: None,
                    template_source: None,
                    family: None,
                    refusal: Some(e.to_string()),
                },
            }),
            Err(header_error) => {
                let header_error = header_error.to_string();
                let hint_url = format!("{}?expand%5B%5D=gguf", Self::api_url(repo, revision));
                let v = self.http.get_json(&hint_url, &format!("the gguf hint of {repo}"))?;
                let template = v["gguf"]["chat_template"].as_str().map(str::to_string);
                if template.is_none() {
                    return Err(HubError::Protocol(format!(
                        "cannot pre-check {repo}/{file}: the header could not be read ({header_error}) and the Hub gives no gguf.chat_template"
                    )));
                }
                let arch = v["gguf"]["architecture"].as_str();
                let templates = GgufTemplates { default: template, tool_use: None };
                let verdict = judge(&model_id, arch, &templates, gate);
                Ok(Precheck { source: PrecheckSource::HubHint { header_error }, verdict })
            }
        }
    }

    /// The cached copy of `repo` at `revision`, without the network.
    ///
    /// # Errors
    /// [`HubError::NotCached`]; the pick errors of [`quant::pick`].
    pub fn cached(&self, repo: &str, opts: &PullOptions) -> Result<Pulled, HubError> {
        cache::check_repo_id(repo)?;
        let cache = self.cache();
        let commit = cache.resolve_revision(repo, &opts.revision).ok_or_else(|| HubError::NotCached {
            repo: repo.to_string(),
            detail: format!("no snapshot for revision `{}` under {}", opts.revision, cache.root().display()),
        })?;
        let files = cache.snapshot_files(repo, &commit);
        let choice = quant::pick(repo, &files, opts.file.as_deref()).map_err(|e| match e {
            HubError::NoGguf { .. } => {
                HubError::NotCached { repo: repo.to_string(), detail: "no .gguf file cached".into() }
            }
            e => e,
        })?;
        if choice.shards.len() > 1 {
            return Err(HubError::SplitUnsupported {
                repo: repo.to_string(),
                file: choice.file,
                shards: choice.shards,
            });
        }
        let path = cache.snapshot_path(repo, &commit, &choice.file)?;
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Ok(Pulled {
            repo: repo.to_string(),
            file: choice.file,
            commit: commit.to_string(),
            path,
            size,
            choice: choice.reason,
            from_cache: true,
            precheck: None,
        })
    }

    /// The whole flow: resolve, pick, pre-check, download, verify (see the module docs).
    /// With [`HubConfig::offline`], only [`Hub::cached`].
    ///
    /// Cost: two or three small API calls, a few range requests for the header, then
    /// the file's size in transfer and one sha256 pass over it.
    ///
    /// # Errors
    /// Each step's [`HubError`]: token, pick and split errors and
    /// [`HubError::Refused`] come before any download; [`HubError::ChecksumMismatch`]
    /// and [`HubError::Interrupted`] leave nothing where a model is expected;
    /// [`HubError::VerifyFailed`] names the quarantine path.
    pub fn pull(&self, repo: &str, opts: &PullOptions, progress: &mut dyn Progress) -> Result<Pulled, HubError> {
        if self.config.offline {
            return self.cached(repo, opts);
        }
        cache::check_revision(&opts.revision)?;
        progress.note(&format!("resolving {repo} ({}) on {}", opts.revision, self.config.endpoint));
        let info = self.repo_info(repo, &opts.revision)?;
        if !self.http.has_token() {
            if info.gated.is_some() {
                return Err(HubError::NeedsToken { repo: repo.to_string(), kind: "gated" });
            }
            if info.private {
                return Err(HubError::NeedsToken { repo: repo.to_string(), kind: "private" });
            }
        }
        for f in &info.files {
            cache::check_repo_file(f)?;
        }
        let choice = quant::pick(repo, &info.files, opts.file.as_deref())?;
        if choice.shards.len() > 1 {
            return Err(HubError::SplitUnsupported {
                repo: repo.to_string(),
                file: choice.file,
                shards: choice.shards,
            });
        }
        let file = choice.file.clone();
        progress.note(&format!("chose {file} ({})", choice.reason));
        let cache = self.cache();
        let listed_commit = match &info.commit {
            Some(c) => Some(CommitId::parse(c).map_err(|e| HubError::Protocol(format!("{repo}: sha: {e}")))?),
            None => None,
        };
        if let Some(commit) = &listed_commit {
            let path = cache.snapshot_path(repo, commit, &file)?;
            if path.is_file() {
                cache.write_ref(repo, &opts.revision, commit)?;
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                progress.note(&format!("already cached: {}", path.display()));
                return Ok(Pulled {
                    repo: repo.to_string(),
                    file,
                    commit: commit.to_string(),
                    path,
                    size,
                    choice: choice.reason,
                    from_cache: true,
                    precheck: None,
                });
            }
        }
        let (sha256, size, head_commit) = self.file_meta(repo, &opts.revision, &file)?;
        // The snapshot directory is named by a commit id and nothing else: the one the
        // repository listing gave, else the file's `x-repo-commit`, else the revision
        // when it is a commit id itself.
        let commit = match listed_commit.or(head_commit) {
            Some(c) => c,
            None => CommitId::parse(&opts.revision).map_err(|_| {
                HubError::Protocol(format!(
                    "{repo}: the Hub named no commit for revision `{}`, so the file has no snapshot to go in",
                    opts.revision
                ))
            })?,
        };

        let precheck = self.precheck(repo, &opts.revision, &file, Some(size), &opts.gate)?;
        let how = match &precheck.source {
            PrecheckSource::Header { bytes, requests } => format!("header, {bytes} bytes in {requests} range requests"),
            PrecheckSource::HubHint { header_error } => {
                format!("the Hub's gguf.chat_template hint; the header could not be read: {header_error}")
            }
        };
        match &precheck.verdict.refusal {
            Some(reason) if !opts.force => {
                return Err(HubError::Refused { repo: repo.to_string(), file, reason: reason.clone() })
            }
            Some(reason) => {
                progress.note(&format!("pre-check refused the model ({how}): {reason}; downloading anyway (--force)"))
            }
            None => progress.note(&format!(
                "pre-check passed ({how}): architecture {}, template {}, family {}",
                precheck.verdict.architecture.as_deref().unwrap_or("?"),
                precheck.verdict.template_source.as_deref().unwrap_or("?"),
                precheck.verdict.family.as_deref().unwrap_or("?"),
            )),
        }

        let blob = cache.blob_path(repo, &sha256);
        if !blob.is_file() {
            progress.note(&format!("downloading {file} ({size} bytes)"));
            let job = download::Download {
                url: format!(
                    "{}{}",
                    self.config.endpoint.trim_end_matches('/'),
                    Self::resolve_url(repo, &opts.revision, &file)
                ),
                size,
                sha256: sha256.as_str().to_string(),
                incomplete: cache.incomplete_path(repo, &sha256),
                blob: blob.clone(),
                attempts: self.config.attempts.max(1),
            };
            job.run(&self.http, progress)?;
            progress.note(&format!("sha256 verified: {}", sha256.as_str()));
        }
        let path = cache.link(repo, &commit, &file, &sha256)?;
        cache.write_ref(repo, &opts.revision, &commit)?;

        let verdict = verify_file(&format!("{repo}/{file}"), &path, &opts.gate);
        if let Some(reason) = verdict.refusal {
            let quarantined = cache.quarantine(repo, &file, &path, &reason)?;
            return Err(HubError::VerifyFailed { repo: repo.to_string(), file, reason, quarantined });
        }
        progress.note(&format!("verified as a model: {}", path.display()));
        Ok(Pulled {
            repo: repo.to_string(),
            file,
            commit: commit.to_string(),
            path,
            size,
            choice: choice.reason,
            from_cache: false,
            precheck: Some(precheck),
        })
    }
}

/// Whether a `--model` argument names a Hub repository rather than a local file: it
/// does not exist on disk, does not end in `.gguf`, and is a valid repository id with
/// an organisation (`ORG/NAME`).
pub fn looks_like_repo_id(model: &str) -> bool {
    !Path::new(model).exists()
        && !model.to_ascii_lowercase().ends_with(".gguf")
        && model.matches('/').count() == 1
        && cache::check_repo_id(model).is_ok()
}
