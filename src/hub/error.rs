//! What can go wrong talking to the Hub or the cache, one variant per step of
//! [`super::Hub::pull`].

use std::path::PathBuf;

use super::quant;

/// Everything that can go wrong talking to the Hub or the cache.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Not `NAME` or `ORG/NAME`.
    #[error("`{0}` is not a Hugging Face repository id (expected ORG/NAME)")]
    InvalidRepoId(String),
    /// 401 from the Hub.
    #[error("authentication required for {what}: {}", if *token_sent { "the Hub rejected the token (check HF_TOKEN)" } else { "set HF_TOKEN (the repository is private or gated)" })]
    Unauthorized {
        /// What was asked for.
        what: String,
        /// Whether a token was sent.
        token_sent: bool,
    },
    /// 403 from the Hub.
    #[error(
        "access to {what} is forbidden: accept the model's license on the Hub (and check that the token may read it)"
    )]
    Forbidden {
        /// What was asked for.
        what: String,
    },
    /// The repository is gated or private and no token is configured.
    #[error("model {repo} is {kind}, set HF_TOKEN (and accept its license on the Hub)")]
    NeedsToken {
        /// The repository.
        repo: String,
        /// `gated` or `private`.
        kind: &'static str,
    },
    /// 404 from the Hub.
    #[error("{what} not found on the Hub")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// The repository has no `.gguf` file.
    #[error("{repo} has no .gguf file (toolgate runs GGUF models; look for a -GGUF repository)")]
    NoGguf {
        /// The repository.
        repo: String,
    },
    /// `--file` names no `.gguf` file of the repository.
    #[error("{repo} has no file `{file}`; its .gguf files: {available}")]
    FileNotFound {
        /// The repository.
        repo: String,
        /// The file asked for.
        file: String,
        /// The `.gguf` files there are.
        available: String,
    },
    /// Several model files and none of the preferred quantizations.
    #[error("{repo}: none of the preferred quantizations ({}) among {available}; choose one with --file", quant::PREFERENCE.join(", "))]
    AmbiguousFile {
        /// The repository.
        repo: String,
        /// The `.gguf` files there are.
        available: String,
    },
    /// The chosen model is split into shards.
    #[error("{repo}: {file} is one of {} shards ({}); toolgate loads single-file GGUF only: merge them with `llama-gguf-split --merge {file} merged.gguf`, or choose a single-file quantization with --file", shards.len(), shards.join(", "))]
    SplitUnsupported {
        /// The repository.
        repo: String,
        /// The first shard.
        file: String,
        /// All shards.
        shards: Vec<String>,
    },
    /// The pre-check refused the model before download.
    #[error("{repo}/{file} refused before download: {reason} (--force downloads it anyway)")]
    Refused {
        /// The repository.
        repo: String,
        /// The file.
        file: String,
        /// The gate's or loader's reason.
        reason: String,
    },
    /// The downloaded file failed verification and was quarantined.
    #[error("{repo}/{file} failed verification after download and was quarantined at {}: {reason}", quarantined.display())]
    VerifyFailed {
        /// The repository.
        repo: String,
        /// The file.
        file: String,
        /// Why.
        reason: String,
        /// Where the file is now.
        quarantined: PathBuf,
    },
    /// The Hub reported no sha256 for the file, so it cannot be verified.
    #[error("{url}: the Hub reported no sha256 for this file, so it cannot be verified; refusing to download it")]
    NoChecksum {
        /// The file's URL.
        url: String,
    },
    /// The downloaded bytes do not have the sha256 the Hub reported.
    #[error(
        "{url}: sha256 mismatch: the Hub reported {expected}, the download has {actual}; the partial file was deleted"
    )]
    ChecksumMismatch {
        /// The file's URL.
        url: String,
        /// What the Hub reported.
        expected: String,
        /// What arrived.
        actual: String,
    },
    /// The download kept failing after every resume attempt.
    #[error("{url}: download interrupted at {have} of {size} bytes after every retry ({reason}); run the command again to resume")]
    Interrupted {
        /// The file's URL.
        url: String,
        /// Bytes kept for resuming.
        have: u64,
        /// Total bytes.
        size: u64,
        /// The last error.
        reason: String,
    },
    /// The connection failed.
    #[error("{url}: {reason}")]
    Network {
        /// The URL.
        url: String,
        /// The transport error.
        reason: String,
    },
    /// Another error status.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The Hub answered something toolgate cannot use.
    #[error("unexpected answer from the Hub: {0}")]
    Protocol(String),
    /// `HF_HUB_OFFLINE` is set, or nothing is cached.
    #[error("{repo} is not in the cache ({detail})")]
    NotCached {
        /// The repository.
        repo: String,
        /// What was missing.
        detail: String,
    },
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}
