//! Which chat template a model will actually use.
//!
//! Order: an explicit override (`--chat-template FILE`), the GGUF's
//! `tokenizer.chat_template.tool_use`, its `tokenizer.chat_template`, else ChatML
//! (which has no tool support, so the gate refuses it unless a fallback is chosen).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::render::ChatTemplate;
use crate::gguf::GgufFile;
use crate::{Error, Result};

/// Where the effective template came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum TemplateSource {
    /// `--chat-template FILE`.
    Override(PathBuf),
    /// GGUF `tokenizer.chat_template.tool_use`.
    GgufToolUse,
    /// GGUF `tokenizer.chat_template`.
    Gguf,
    /// No template in the file: plain ChatML.
    ChatMlDefault,
    /// `--tool-fallback generic`: toolgate's generic tool template (`grammars/generic.jinja`).
    GenericFallback,
}

impl std::fmt::Display for TemplateSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Override(p) => write!(f, "--chat-template {}", p.display()),
            Self::GgufToolUse => f.write_str("GGUF tokenizer.chat_template.tool_use"),
            Self::Gguf => f.write_str("GGUF tokenizer.chat_template"),
            Self::ChatMlDefault => f.write_str("default ChatML (the GGUF has no chat template)"),
            Self::GenericFallback => f.write_str("toolgate generic tool template (--tool-fallback generic)"),
        }
    }
}

/// Plain ChatML without tool support: what a GGUF without a template gets.
pub const CHATML: &str = "{%- for message in messages -%}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}";

/// toolgate's own tool-capable template, used by `--tool-fallback generic`.
pub const GENERIC: &str = include_str!("../../grammars/generic.jinja");

/// The template metadata of a GGUF file, without loading weights.
#[derive(Debug, Clone, Default)]
pub struct GgufTemplates {
    /// `tokenizer.chat_template`.
    pub default: Option<String>,
    /// `tokenizer.chat_template.tool_use`.
    pub tool_use: Option<String>,
}

impl GgufTemplates {
    /// Read both template keys.
    ///
    /// # Errors
    /// [`Error::Metadata`] if a key is present but not a string.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        Self::from_metadata(gguf.metadata(), gguf.path())
    }

    /// Read both template keys from parsed GGUF metadata (a header read without the
    /// file, e.g. by HTTP range requests); `name` is used in errors.
    ///
    /// # Errors
    /// [`Error::Metadata`] if a key is present but not a string.
    pub fn from_metadata(meta: &std::collections::HashMap<String, crate::gguf::Value>, name: &Path) -> Result<Self> {
        let get = |key: &str| match meta.get(key) {
            None => Ok(None),
            Some(crate::gguf::Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(Error::Metadata {
                path: name.to_path_buf(),
                key: key.to_string(),
                reason: format!("expected a string, found {:?}", v.value_type()),
            }),
        };
        Ok(Self { default: get("tokenizer.chat_template")?, tool_use: get("tokenizer.chat_template.tool_use")? })
    }
}

/// Choose the effective template.
///
/// # Errors
/// [`Error::Io`] if the override file cannot be read; [`Error::Template`] if the
/// chosen source does not parse.
pub fn select(templates: &GgufTemplates, override_path: Option<&Path>) -> Result<(ChatTemplate, TemplateSource)> {
    if let Some(p) = override_path {
        let src = std::fs::read_to_string(p).map_err(|e| Error::Io { path: p.to_path_buf(), source: e })?;
        return Ok((ChatTemplate::new(p.display().to_string(), src)?, TemplateSource::Override(p.to_path_buf())));
    }
    if let Some(src) = &templates.tool_use {
        return Ok((ChatTemplate::new("tokenizer.chat_template.tool_use", src.clone())?, TemplateSource::GgufToolUse));
    }
    if let Some(src) = &templates.default {
        return Ok((ChatTemplate::new("tokenizer.chat_template", src.clone())?, TemplateSource::Gguf));
    }
    Ok((ChatTemplate::new("chatml", CHATML)?, TemplateSource::ChatMlDefault))
}

/// The generic fallback template.
///
/// # Errors
/// Never in practice (the template is part of the build and tested).
pub fn generic() -> Result<(ChatTemplate, TemplateSource)> {
    Ok((ChatTemplate::new("grammars/generic.jinja", GENERIC)?, TemplateSource::GenericFallback))
}
