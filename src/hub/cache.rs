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

use std::path::{Component, Path, PathBuf};

use super::HubError;

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
        Err(HubError::Protocol(format!("unsafe file path `{file}` in the repository listing")))
    } else {
        Ok(())
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
    pub fn blob_path(&self, repo: &str, sha256: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(sha256)
    }

    /// Where a download of this blob accumulates until it is verified.
    pub fn incomplete_path(&self, repo: &str, sha256: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(format!("{sha256}.incomplete"))
    }

    /// The snapshot entry of `file` at `commit`.
    pub fn snapshot_path(&self, repo: &str, commit: &str, file: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit).join(file)
    }

    /// The commit a revision resolved to when last pulled: a full commit hash is its
    /// own answer when its snapshot exists, else `refs/{revision}`.
    pub fn resolve_revision(&self, repo: &str, revision: &str) -> Option<String> {
        let snapshots = self.repo_dir(repo).join("snapshots");
        if revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()) && snapshots.join(revision).is_dir()
        {
            return Some(revision.to_string());
        }
        if revision.split('/').any(|p| p == ".." || p.is_empty()) {
            return None;
        }
        let commit = std::fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
        let commit = commit.trim();
        (!commit.is_empty() && !commit.contains(['/', '.'])).then(|| commit.to_string())
    }

    /// Record that `revision` points at `commit`.
    ///
    /// # Errors
    /// [`HubError::Io`].
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit || revision.split('/').any(|p| p == ".." || p.is_empty()) {
            return Ok(());
        }
        let path = self.repo_dir(repo).join("refs").join(revision);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, commit).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }

    /// The model files of a cached snapshot (`.gguf` files whose target exists).
    pub fn snapshot_files(&self, repo: &str, commit: &str) -> Vec<String> {
        let dir = self.repo_dir(repo).join("snapshots").join(commit);
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
    /// [`HubError::Io`].
    pub fn link(&self, repo: &str, commit: &str, file: &str, sha256: &str) -> Result<PathBuf, HubError> {
        let entry = self.snapshot_path(repo, commit, file);
        let dir = entry.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let _ = std::fs::remove_file(&entry);
        let blob = self.blob_path(repo, sha256);
        #[cfg(unix)]
        {
            let depth = file.split('/').count() + 1; // snapshots/{commit}/{sub/dirs/}file
            let mut target = PathBuf::new();
            for _ in 0..depth {
                target.push("..");
            }
            target.push("blobs");
            target.push(sha256);
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
                let commit = commit.file_name().to_string_lossy().into_owned();
                for file in self.snapshot_files(&repo, &commit) {
                    let path = self.snapshot_path(&repo, &commit, &file);
                    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    out.push(CachedFile { repo: repo.clone(), file, commit: commit.clone(), path, size });
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
    /// # Errors
    /// [`HubError::Io`].
    pub fn quarantine(&self, repo: &str, file: &str, path: &Path, reason: &str) -> Result<PathBuf, HubError> {
        let dir = self.root.join("toolgate-quarantine").join(repo.replace('/', "--"));
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let dest = dir.join(file.replace('/', "--"));
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
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
