//! The crate-wide error type. Every fallible public function returns [`Result`].
//!
//! Errors are values: a bad GGUF file, an unsupported architecture, a prompt that does
//! not fit the context window each produce a variant that names the input and the
//! problem. Nothing in the library panics on input.

use std::path::PathBuf;

use crate::grammar::error::BuildErrorKind;

/// Everything that can go wrong in toolgate's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a valid GGUF file (bad magic, truncated, corrupt header).
    #[error("{path}: not a valid GGUF file: {reason}")]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A valid GGUF file whose tensors include a type toolgate does not read (the
    /// 1–3-bit i-quants, TQ1_0/TQ2_0, NVFP4, …): the model needs another quantization.
    #[error(
        "{path}: tensor `{tensor}` is {name} (ggml type {ggml_type}), which toolgate does not read (it reads \
         {readable}); pick another quantization of the model, or requantize this file (llama.cpp: `llama-quantize \
         --allow-requantize IN OUT Q4_K_M`)",
        readable = crate::gguf::READABLE_TYPES
    )]
    UnsupportedTensorType {
        /// The file.
        path: PathBuf,
        /// The first tensor of that type.
        tensor: String,
        /// ggml's id of the type.
        ggml_type: u32,
        /// ggml's name of the type.
        name: String,
    },
    /// A metadata key the loader needs is missing or has the wrong type.
    #[error("{path}: GGUF metadata `{key}`: {reason}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The metadata key.
        key: String,
        /// Missing, or the type found.
        reason: String,
    },
    /// A tensor the architecture needs is missing, has the wrong shape or cannot be read.
    #[error("{path}: tensor `{name}`: {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// What was wrong.
        reason: String,
    },
    /// `general.architecture` names an architecture toolgate does not implement.
    #[error("{path}: unsupported architecture `{arch}` (supported: {supported})")]
    UnsupportedArchitecture {
        /// The file.
        path: PathBuf,
        /// The architecture found.
        arch: String,
        /// The supported list, comma-separated.
        supported: String,
    },
    /// The tokenizer described by the GGUF metadata cannot be built.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The prompt plus the requested tokens do not fit the model's context window.
    #[error(
        "context overflow: the prompt has at least {prompt_tokens} tokens and the context window is {context_length}"
    )]
    ContextOverflow {
        /// Tokens in the prompt, or as many as were counted before it was certain the
        /// prompt cannot fit (a long prompt is not tokenized in full only to be refused).
        prompt_tokens: usize,
        /// The model's context length.
        context_length: usize,
    },
    /// An invalid generation parameter (for example a negative temperature).
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The requested device is not compiled in or not available.
    #[error("device `{device}` unavailable: {reason}")]
    Device {
        /// The device name.
        device: String,
        /// Why.
        reason: String,
    },
    /// A chat template failed to parse or render (it raised, looped, or is malformed).
    #[error("chat template `{template}`: {reason}")]
    Template {
        /// The template's name (file or source).
        template: String,
        /// What went wrong, with minijinja's location when it has one.
        reason: String,
    },
    /// A JSON Schema is invalid or uses a keyword toolgate cannot enforce.
    #[error("schema at `{pointer}`: {reason}")]
    Schema {
        /// JSON pointer of the offending keyword (`#/properties/x/format`).
        pointer: String,
        /// What kind of problem: invalid, unsupported, unsatisfiable, too large, or
        /// an unreadable pattern.
        kind: BuildErrorKind,
        /// What is wrong.
        reason: String,
    },
    /// The model's chat template cannot do tool calling; the model is refused at load.
    #[error("{0}")]
    NotToolCapable(String),
    /// An OpenAI-compatible server (the bench's `--server`) could not be reached or
    /// answered something that is not a chat completion.
    #[error("server {url}: {reason}")]
    Server {
        /// The URL requested.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// Pulling a model from the Hugging Face Hub failed.
    #[error(transparent)]
    Hub(#[from] crate::hub::HubError),
    /// An error inside candle during a forward pass.
    #[error("model execution: {0}")]
    Candle(#[from] candle_core::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
