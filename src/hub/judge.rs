//! The gate before and after a download: a model judged from its metadata alone
//! (architecture and chat template) the way `serve` judges it, so a model `serve`
//! would refuse is refused before its weights are fetched.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::gguf::GgufFile;
use crate::model::arch;
use crate::template::source::GgufTemplates;
use crate::template::ToolFallback;

/// How the gate judges a model (the same options as `serve`).
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// What to do with a model whose template cannot do tools.
    pub fallback: ToolFallback,
    /// A template file to use instead of the model's.
    pub chat_template: Option<PathBuf>,
}

/// What the pre-check read.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PrecheckSource {
    /// The GGUF header, by range requests.
    Header {
        /// Bytes fetched.
        bytes: u64,
        /// Range requests made.
        requests: usize,
    },
    /// The Hub's `?expand[]=gguf` hint (the header could not be read).
    HubHint {
        /// Why the header could not be read.
        header_error: String,
    },
}

/// The verdict of the pre-check (before download) or the verification (after).
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `general.architecture`.
    pub architecture: Option<String>,
    /// Where the judged template came from.
    pub template_source: Option<String>,
    /// The tool-call family of the template.
    pub family: Option<String>,
    /// `None` when the model passes; else why it is refused.
    pub refusal: Option<String>,
}

/// The pre-check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Precheck {
    /// What was read.
    pub source: PrecheckSource,
    /// The verdict.
    pub verdict: Verdict,
}

/// Judge a model from its metadata the way `serve` will: supported architecture and
/// the chat-template gate.
pub(super) fn judge(model_id: &str, arch: Option<&str>, templates: &GgufTemplates, gate: &GateOptions) -> Verdict {
    let mut v = Verdict { architecture: arch.map(str::to_string), template_source: None, family: None, refusal: None };
    match arch {
        Some(a) if arch::spec_for(a).is_none() => {
            v.refusal = Some(format!("unsupported architecture `{a}` (supported: {})", arch::SUPPORTED.join(", ")));
            return v;
        }
        _ => {}
    }
    match crate::template::gate(model_id, templates, arch, gate.chat_template.as_deref(), gate.fallback) {
        Ok(setup) => {
            v.template_source = Some(setup.source.to_string());
            v.family = Some(setup.family().to_string());
            if setup.layout.format.is_none() {
                v.refusal = Some(format!(
                    "{model_id}: its chat template's tool-call layout cannot be read ({}); \
                     serve it with --tool-format FAMILY or --tool-fallback generic",
                    setup.layout.round_trip
                ));
            }
        }
        Err(e) => v.refusal = Some(e.to_string()),
    }
    v
}

/// Verify a local GGUF file as a model: header and tensor extents, tokenizer,
/// architecture, and the gate. This is what [`super::Hub::pull`] runs after a download.
///
/// Cost: reads the header and builds the tokenizer (well under a second for small
/// models); the weights are not loaded.
pub fn verify_file(model_id: &str, path: &Path, gate: &GateOptions) -> Verdict {
    let gguf = match GgufFile::open(path) {
        Ok(g) => g,
        Err(e) => {
            return Verdict { architecture: None, template_source: None, family: None, refusal: Some(e.to_string()) }
        }
    };
    let arch = gguf.architecture().ok().map(str::to_string);
    let fail = |reason: String| Verdict {
        architecture: arch.clone(),
        template_source: None,
        family: None,
        refusal: Some(reason),
    };
    if let Err(e) = crate::tokenizer::Tokenizer::from_gguf(&gguf) {
        return fail(e.to_string());
    }
    let templates = match GgufTemplates::from_gguf(&gguf) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    judge(model_id, arch.as_deref(), &templates, gate)
}
