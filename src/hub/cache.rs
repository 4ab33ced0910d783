//! The local model cache, in the layout of the `huggingface_hub` cache, so models
//! pulled by other tools are found without downloading again:
//!
//! ```text
//! {root}/models--ORG--NAME/
//!     blobs/{sha256}                  verified file contents (the only real files)
//!     blobs/{sha256}.incomplete       a download in progress, resumable
//!     refs/{revision}                 the commit a branch or tag pointed to
//!     snapshots/{commit}/{file}       relative symlink to ../../blobs/{sha256}
//! {root}/toolgate-quarantine/ORG--NAME/{file}[.reason]
//! ```
//!
//! A blob is only ever created by renaming a fully downloaded file whose sha256 was
//! checked, so nothing partial or unverified is ever where a model is expected.
//!
//! # What may name a path
//! Everything the Hub answers is untrusted. Only three kinds of value from it ever
//! become part of a path, and each has a type that can only be made by checking it:
//! a blob name is a [`BlobId`] (64 hex digits), a snapshot directory is a
//! [`CommitId`] (40 hex digits), and a file inside a snapshot passes
//! [`check_repo_file`] (relative, `/`-separated, no `.`/`..`/empty parts). The
//! methods that build paths take those types, so an oid of `../../x` or a commit of
//! `/abs/dir` is an error before anything touches the disk.

use std::path::{Component, Path, PathBuf};

use super::HubError;
use crate::template::source::GgufTemplates;

/// The cache root and the operations on it. Cheap to clone; holds no open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    root: PathBuf,
}

/// One cached model file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CachedFile {
    /// Repository id, `ORG/NAME`.
    pub repo: String,
    /// File path inside the repository.
    pub file: String,
    /// The commit of the snapshot holding it.
    pub commit: String,
    /// Path to open (the snapshot entry).
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
}

/// A cached model file and what its header says: a row of `toolgate list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CachedModel {
    /// The file.
    #[serde(flatten)]
    pub file: CachedFile,
    /// The GGUF's quantization (`Q4_K_M`…), or `?` when its header does not read.
    pub quantization: String,
    /// `tools (FAMILY)`, `no tools (needs --tool-fallback generic)`, or why the header
    /// or template could not be read.
    pub caps: String,
}

impl CachedFile {
    /// Read this file's header: its quantization and whether its chat template can do
    /// tools.
    ///
    /// Cost: the GGUF header (not the weights) and one template probe, milliseconds.
    /// Never fails: an unreadable file says so in [`CachedModel::caps`].
    pub fn describe(&self) -> CachedModel {
        let (quantization, caps) = match crate::gguf::GgufFile::open(&self.path) {
            Ok(g) => {
                let arch = g.architecture().ok().map(str::to_string);
                let caps = GgufTemplates::from_gguf(&g)
                    .and_then(|t| crate::template::inspect(&t, arch.as_deref(), None))
                    .map(|s| {
                        if s.report.caps.tool_capable() {
                            format!("tools ({})", s.family())
                        } else {
                            "no tools (needs --tool-fallback generic)".to_string()
                        }
                    })
                    .unwrap_or_else(|e| format!("unreadable template: {e}"));
                (g.quantization(), caps)
            }
            Err(e) => ("?".to_string(), format!("unreadable: {e}")),
        };
        CachedModel { file: self.clone(), quantization, caps }
    }
}

/// Check a repository id: `NAME` or `ORG/NAME`, each part of letters, digits, `-`,
/// `_` and `.`, not starting with `.`.
///
/// # Errors
/// [`HubError::InvalidRepoId`].
pub fn check_repo_id(repo: &str) -> Result<(), HubError> {
    let ok_part = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && !p.starts_with('.')
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() <= 2 && parts.iter().all(|p| ok_part(p)) {
        Ok(())
    } else {
        Err(HubError::InvalidRepoId(repo.to_string()))
    }
}

/// Check a file path received from the Hub before it names anything on disk: relative,
/// `/`-separated, no `..`, no empty parts.
///
/// # Errors
/// [`HubError::Protocol`] naming the path.
pub fn check_repo_file(file: &str) -> Result<(), HubError> {
    let bad = file.is_empty()
        || file.contains('\\')
        || file.contains('\0')
        || Path::new(file).components().any(|c| !matches!(c, Component::Normal(_)))
        || file.split('/').any(|p| p.is_empty() || p == "." || p == "..");
    if bad {
        Err(HubError::Protocol(format!("unsafe file path `{}` in the repository listing", shorten(file))))
    } else {
        Ok(())
    }
}

/// A blob's name: the sha256 of its contents, 64 lower-case hex digits.
///
/// The only way to make one is [`BlobId::parse`], so a `BlobId` is always safe as a
/// file name.
///
/// ```
/// use toolgate::hub::cache::BlobId;
/// let id = BlobId::parse(&"AB".repeat(32)).unwrap();
/// assert_eq!(id.as_str(), "ab".repeat(32));
/// assert!(BlobId::parse("../../x/planted").is_err());
/// assert!(BlobId::parse("/etc/passwd").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobId(String);

impl BlobId {
    /// Check `hex` (any case, an optional `sha256:` prefix) and keep it lower-cased.
    ///
    /// Cost: one pass over at most 71 bytes.
    ///
    /// # Errors
    /// [`HubError::Protocol`] naming the value, when it is not 64 hex digits.
    pub fn parse(hex: &str) -> Result<Self, HubError> {
        let h = hex.strip_prefix("sha256:").unwrap_or(hex);
        if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(h.to_ascii_lowercase()))
        } else {
            Err(HubError::Protocol(format!("`{}` is not a sha256 (64 hex digits)", shorten(hex))))
        }
    }

    /// The 64 lower-case hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A commit of a repository: 40 lower-case hex digits (a git SHA-1), the name of a
/// snapshot directory.
///
/// The only way to make one is [`CommitId::parse`].
///
/// ```
/// use toolgate::hub::cache::CommitId;
/// assert!(CommitId::parse(&"c".repeat(40)).is_ok());
/// for bad in ["main", "../../../../somewhere", "/abs/dir", ""] {
///     assert!(CommitId::parse(bad).is_err(), "{bad}");
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommitId(String);

impl CommitId {
    /// Check `hex` (any case) and keep it lower-cased.
    ///
    /// Cost: one pass over at most 40 bytes.
    ///
    /// # Errors
    /// [`HubError::Protocol`] naming the value, when it is not 40 hex digits.
    pub fn parse(hex: &str) -> Result<Self, HubError> {
        if hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(hex.to_ascii_lowercase()))
        } else {
            Err(HubError::Protocol(format!("`{}` is not a commit id (40 hex digits)", shorten(hex))))
        }
    }

    /// The 40 lower-case hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CommitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// At most 80 characters of an untrusted value, for an error message.
fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Check a revision name (a branch, tag or `refs/pr/N`) before it names a file under
/// `refs/`: the parts of [`check_repo_file`], at most 256 bytes.
///
/// # Errors
/// [`HubError::Protocol`] naming the revision.
pub fn check_revision(revision: &str) -> Result<(), HubError> {
    if revision.len() <= 256 && check_repo_file(revision).is_ok() {
        Ok(())
    } else {
        Err(HubError::Protocol(format!("unsafe revision name `{}`", shorten(revision))))
    }
}

fn io(path: &Path, source: std::io::Error) -> HubError {
    HubError::Io { path: path.to_path_buf(), source }
}

impl Cache {
    /// A cache rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root `huggingface_hub` uses: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`.
    pub fn from_env() -> Self {
        if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
            return Self::new(p);
        }
        Self::new(super::hf_home().join("hub"))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/models--ORG--NAME`.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root.join(format!("models--{}", repo.replace('/', "--")))
    }

    /// Where the verified contents with this sha256 live.
    pub fn blob_path(&self, repo: &str, blob: &BlobId) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(blob.as_str())
    }

    /// Where a download of this blob accumulates until it is verified.
    pub fn incomplete_path(&self, repo: &str, blob: &BlobId) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(format!("{}.incomplete", blob.as_str()))
    }

    /// The snapshot entry of `file` at `commit`.
    ///
    /// # Errors
    /// [`HubError::Protocol`] when `file` fails [`check_repo_file`].
    pub fn snapshot_path(&self, repo: &str, commit: &CommitId, file: &str) -> Result<PathBuf, HubError> {
        check_repo_file(file)?;
        Ok(self.repo_dir(repo).join("snapshots").join(commit.as_str()).join(file))
    }

    /// The commit a revision resolved to when last pulled: a full commit hash is its
    /// own answer when its snapshot exists, else the commit written in
    /// `refs/{revision}` (when it is one: a ref file holding anything else is
    /// ignored).
    pub fn resolve_revision(&self, repo: &str, revision: &str) -> Option<CommitId> {
        if let Ok(commit) = CommitId::parse(revision) {
            if self.repo_dir(repo).join("snapshots").join(commit.as_str()).is_dir() {
                return Some(commit);
            }
        }
        check_revision(revision).ok()?;
        let text = std::fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
        CommitId::parse(text.trim()).ok()
    }

    /// Record that `revision` points at `commit` (nothing to record when the revision
    /// is the commit itself).
    ///
    /// # Errors
    /// [`HubError::Protocol`] for a revision [`check_revision`] refuses; [`HubError::Io`].
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &CommitId) -> Result<(), HubError> {
        if revision.eq_ignore_ascii_case(commit.as_str()) {
            return Ok(());
        }
        check_revision(revision)?;
        let path = self.repo_dir(repo).join("refs").join(revision);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, commit.as_str()).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }

    /// The model files of a cached snapshot (`.gguf` files whose target exists).
    pub fn snapshot_files(&self, repo: &str, commit: &CommitId) -> Vec<String> {
        let dir = self.repo_dir(repo).join("snapshots").join(commit.as_str());
        let mut out = Vec::new();
        walk(&dir, &dir, &mut out);
        out.sort();
        out
    }

    /// Make `snapshots/{commit}/{file}` point at the blob `sha256` (a relative
    /// symlink, as `huggingface_hub` does; a copy where symlinks are unavailable) and
    /// return the snapshot path.
    ///
    /// # Errors
    /// [`HubError::Protocol`] for a `file` that fails [`check_repo_file`];
    /// [`HubError::Io`].
    pub fn link(&self, repo: &str, commit: &CommitId, file: &str, blob_id: &BlobId) -> Result<PathBuf, HubError> {
        let entry = self.snapshot_path(repo, commit, file)?;
        let dir = entry.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let _ = std::fs::remove_file(&entry);
        let blob = self.blob_path(repo, blob_id);
        #[cfg(unix)]
        {
            let depth = file.split('/').count() + 1; // snapshots/{commit}/{sub/dirs/}file
            let mut target = PathBuf::new();
            for _ in 0..depth {
                target.push("..");
            }
            target.push("blobs");
            target.push(blob_id.as_str());
            if std::os::unix::fs::symlink(&target, &entry).is_ok() {
                return Ok(entry);
            }
        }
        std::fs::copy(&blob, &entry).map_err(|e| io(&entry, e))?;
        Ok(entry)
    }

    /// Every cached model file, sorted by repository and file.
    pub fn list(&self) -> Vec<CachedFile> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.root) else { return out };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("models--") else { continue };
            let repo = rest.replacen("--", "/", 1);
            let Ok(commits) = std::fs::read_dir(entry.path().join("snapshots")) else { continue };
            for commit in commits.flatten() {
                // Directories that are not commits are not ours (or not finished): skip.
                let Ok(commit) = CommitId::parse(&commit.file_name().to_string_lossy()) else { continue };
                for file in self.snapshot_files(&repo, &commit) {
                    let Ok(path) = self.snapshot_path(&repo, &commit, &file) else { continue };
                    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    out.push(CachedFile { repo: repo.clone(), file, commit: commit.to_string(), path, size });
                }
            }
        }
        out.sort_by(|a, b| (&a.repo, &a.file, &a.commit).cmp(&(&b.repo, &b.file, &b.commit)));
        out
    }

    /// Remove a repository from the cache, or only `file` (its snapshot entries and
    /// the blobs no other entry uses). Returns the paths removed.
    ///
    /// # Errors
    /// [`HubError::NotCached`] when nothing matches; [`HubError::Io`].
    pub fn remove(&self, repo: &str, file: Option<&str>) -> Result<Vec<PathBuf>, HubError> {
        check_repo_id(repo)?;
        let dir = self.repo_dir(repo);
        if !dir.is_dir() {
            return Err(HubError::NotCached { repo: repo.to_string(), detail: "not in the cache".into() });
        }
        let Some(file) = file else {
            std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
            return Ok(vec![dir]);
        };
        check_repo_file(file)?;
        let mut removed = Vec::new();
        let mut blobs = Vec::new();
        for cached in self.list().into_iter().filter(|c| c.repo == repo && c.file == file) {
            if let Ok(target) = std::fs::canonicalize(&cached.path) {
                blobs.push(target);
            }
            std::fs::remove_file(&cached.path).map_err(|e| io(&cached.path, e))?;
            removed.push(cached.path);
        }
        if removed.is_empty() {
            return Err(HubError::NotCached { repo: repo.to_string(), detail: format!("no file `{file}` cached") });
        }
        let still_used: Vec<PathBuf> = self
            .list()
            .into_iter()
            .filter(|c| c.repo == repo)
            .filter_map(|c| std::fs::canonicalize(c.path).ok())
            .collect();
        for blob in blobs {
            if !still_used.contains(&blob) && blob.starts_with(&dir) {
                std::fs::remove_file(&blob).map_err(|e| io(&blob, e))?;
                removed.push(blob);
            }
        }
        Ok(removed)
    }

    /// Move a file that failed verification out of the cache, into
    /// `{root}/toolgate-quarantine/ORG--NAME/`, with a `.reason` file beside it, and
    /// remove its snapshot entry. Returns the quarantined path.
    ///
    /// Only a file inside this repository's cache directory is ever moved: `path`
    /// (or the blob it links to) anywhere else is refused, so no answer from the Hub
    /// can make this move a file that is not the cache's.
    ///
    /// # Errors
    /// [`HubError::InvalidRepoId`], [`HubError::Protocol`] for a `file` that fails
    /// [`check_repo_file`] or a `path` outside the repository's cache directory;
    /// [`HubError::Io`].
    pub fn quarantine(&self, repo: &str, file: &str, path: &Path, reason: &str) -> Result<PathBuf, HubError> {
        check_repo_id(repo)?;
        check_repo_file(file)?;
        let real = std::fs::canonicalize(path).map_err(|e| io(path, e))?;
        let repo_dir = std::fs::canonicalize(self.repo_dir(repo)).map_err(|e| io(&self.repo_dir(repo), e))?;
        if !real.starts_with(&repo_dir) {
            return Err(HubError::Protocol(format!(
                "refusing to quarantine {}: it is outside the cache of {repo} ({})",
                real.display(),
                repo_dir.display()
            )));
        }
        let dir = self.root.join("toolgate-quarantine").join(repo.replace('/', "--"));
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let dest = dir.join(file.replace('/', "--"));
        if std::fs::rename(&real, &dest).is_err() {
            std::fs::copy(&real, &dest).map_err(|e| io(&dest, e))?;
            std::fs::remove_file(&real).map_err(|e| io(&real, e))?;
        }
        if real != path {
            let _ = std::fs::remove_file(path);
        }
        let note = dest.with_file_name(format!("{}.reason", dest.file_name().unwrap_or_default().to_string_lossy()));
        std::fs::write(&note, format!("{repo} {file}\n{reason}\n")).map_err(|e| io(&note, e))?;
        Ok(dest)
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(base, &path, out);
        } else if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}
