//! What a model's chat template can do, read from the model's header alone (or from a
//! template file): the report `toolgate probe` prints, as a value an embedder can use.
//!
//! ```no_run
//! let info = toolgate::template::probe::model_info("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(), None)?;
//! println!("tools: {} ({})", info.supports_tools, info.chat_format);
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::path::Path;

use serde::Serialize;

use super::caps::Caps;
use super::source::GgufTemplates;
use crate::gguf::GgufFile;
use crate::tools::layout::CallLayout;
use crate::{Error, Result};

/// A model's (or a template file's) tool-calling capability, as `toolgate probe`
/// prints it (JSON, `"type": "model_info"`).
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// Always `model_info`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The file name.
    pub model: String,
    /// `general.architecture`; `None` for a template file.
    pub architecture: Option<String>,
    /// Parameter count from the tensor shapes; `None` for a template file.
    pub n_params: Option<u64>,
    /// Whether the template (or the override) can do tool calling.
    pub supports_tools: bool,
    /// The prober's flags.
    pub caps: Caps,
    /// `flag name → reason` for each flag.
    pub reasons: std::collections::BTreeMap<&'static str, String>,
    /// The tool-call family the template writes.
    pub chat_format: String,
    /// The call layout, how it was chosen and its round trip.
    pub tool_format: CallLayout,
    /// The GGUF holds a separate `tool_use` template.
    pub has_tool_use_template: bool,
    /// Which template was probed.
    pub template_source: String,
    /// System folding and turn merging applied to requests.
    pub conversation_policy: super::transform::ConversationPolicy,
    /// Signals found in the template text.
    pub template_signals: super::transform::TemplateSignals,
    /// Time the probe took, milliseconds.
    pub probe_ms: f64,
}

/// Probe `target`: a `.gguf` file (only its header is read; recognised by its magic
/// bytes) or a Jinja template file, optionally with `chat_template` probed instead
/// of the model's own.
///
/// Cost: the header read (or the file), then the capability probe and the layout
/// derivation: a few dozen template renders, milliseconds (`BENCHMARKS.md`).
///
/// # Errors
/// [`Error::Io`] when `target` cannot be read, [`Error::InvalidGguf`] for a bad GGUF
/// header, [`Error::Template`] for a template that does not parse.
pub fn model_info(target: &Path, chat_template: Option<&Path>) -> Result<ModelInfo> {
    let t0 = std::time::Instant::now();
    let io = |source| Error::Io { path: target.to_path_buf(), source };
    let mut magic = [0u8; 4];
    let is_gguf = std::fs::File::open(target)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .map(|_| &magic == b"GGUF")
        .or_else(|e| if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(false) } else { Err(e) })
        .map_err(io)?;
    let (templates, architecture, n_params) = if is_gguf {
        let gguf = GgufFile::open(target)?;
        let arch = gguf.architecture().ok().map(str::to_string);
        (GgufTemplates::from_gguf(&gguf)?, arch, Some(gguf.n_params()))
    } else {
        let src = std::fs::read_to_string(target).map_err(io)?;
        super::ChatTemplate::new(target.display().to_string(), src.clone())?;
        (GgufTemplates { default: Some(src), tool_use: None }, None, None)
    };
    let setup = super::inspect(&templates, architecture.as_deref(), chat_template)?;
    Ok(ModelInfo {
        kind: "model_info",
        model: target.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        architecture,
        n_params,
        supports_tools: setup.report.caps.tool_capable(),
        caps: setup.report.caps,
        reasons: setup.report.reasons.clone(),
        chat_format: setup.family().to_string(),
        tool_format: setup.layout.clone(),
        has_tool_use_template: templates.tool_use.is_some(),
        template_source: setup.source.to_string(),
        conversation_policy: setup.policy,
        template_signals: setup.signals,
        probe_ms: t0.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Model output read as a setup's layout lays out calls: what `toolgate tools parse`
/// prints.
#[derive(Debug, Clone, Serialize)]
pub struct OutputReport {
    /// Text outside calls and reasoning.
    pub content: String,
    /// The reasoning block's text (empty when there was none).
    pub reasoning_content: String,
    /// The calls, OpenAI shape.
    pub tool_calls: Vec<crate::tools::ToolCall>,
    /// Call blocks that did not parse.
    pub unparsed_calls: usize,
    /// `accepted`, or where the constrained grammar for these tools rejects the calls.
    pub grammar: String,
    /// The layout used and how it was chosen.
    pub tool_format: CallLayout,
    /// The layout's markers, in one line.
    pub layout: String,
    /// Every call parsed and the grammar accepts them.
    #[serde(skip)]
    pub ok: bool,
}

/// Read `output` (a model's raw text) as `setup` lays out calls to `tools`: content,
/// reasoning and calls as the server's parser reads them, and whether the grammar
/// that constrains such calls accepts the text.
///
/// Cost: one streaming parse and one grammar compile plus a walk of the text.
///
/// # Errors
/// [`Error::InvalidParameter`] (`tool_format`) when the template gives no call layout
/// toolgate can read.
pub fn read_output(setup: &super::ChatSetup, tools: &[crate::tools::Tool], output: &str) -> Result<OutputReport> {
    use crate::tools::{conformance, derive, stream::StreamParser};
    let Some(format) = setup.layout.format.clone() else {
        return Err(Error::InvalidParameter {
            name: "tool_format",
            reason: format!("no tool-call layout for this template: {} (try --tool-format)", setup.layout.round_trip),
        });
    };
    // A layout whose prompt opens the first call: the output starts after its marker
    // (unless it is text that writes the marker again, as a rendered turn may).
    let opened = format.prompt_opens_call && !output.trim_start().starts_with(format.trigger());
    let mut parser = StreamParser::new(Some(format.clone()), false, 1).with_tools(tools);
    if opened {
        parser = parser.opened_by_prompt();
    }
    if let Some((start, end)) = setup.reasoning {
        parser = parser.with_reasoning(start, end, false);
    }
    parser.push(output);
    parser.finish();
    let out = parser.into_output();
    // The grammar reads the marker the prompt wrote, then the output.
    let checked = match opened {
        true => std::borrow::Cow::Owned(format!("{}{output}", format.trigger())),
        false => std::borrow::Cow::Borrowed(output),
    };
    let (grammar, accepted) = match conformance::check_calls(&format, tools, &checked, &setup.layout.turn_end) {
        Ok(verdict) => (verdict, true),
        Err(e) => (e, false),
    };
    Ok(OutputReport {
        ok: out.failures == 0 && accepted,
        content: out.content,
        reasoning_content: out.reasoning,
        tool_calls: out.calls,
        unparsed_calls: out.failures,
        grammar,
        tool_format: setup.layout.clone(),
        layout: derive::summary(&format),
    })
}
