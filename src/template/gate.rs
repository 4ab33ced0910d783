//! The load gate: a model is served for tool calling only if the template that will
//! actually be used can do it.

use std::path::Path;

use serde::Serialize;

use super::caps::{probe, ProbeReport};
use super::render::ChatTemplate;
use super::source::{self, GgufTemplates, TemplateSource};
use super::transform::{self, ConversationPolicy, TemplateSignals};
use crate::tools::layout::{self, resolve, CallLayout};
use crate::{Error, Result};

/// What to do with a model whose template cannot do tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFallback {
    /// Refuse it (the default).
    #[default]
    None,
    /// Use toolgate's generic tool template (`grammars/generic.jinja`).
    Generic,
}

impl std::str::FromStr for ToolFallback {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Self::None),
            "generic" => Ok(Self::Generic),
            other => Err(Error::InvalidParameter {
                name: "tool-fallback",
                reason: format!("`{other}`: expected none or generic"),
            }),
        }
    }
}

/// The chat setup of a model that passed the gate.
#[derive(Debug, Clone)]
pub struct ChatSetup {
    /// The template requests are rendered with.
    pub template: ChatTemplate,
    /// Where it came from.
    pub source: TemplateSource,
    /// The prober's flags and reasons for it.
    pub report: ProbeReport,
    /// Signals found in the template text.
    pub signals: TemplateSignals,
    /// System folding / turn merging to apply to requests.
    pub policy: ConversationPolicy,
    /// The call layout, with how it was chosen and its round trip
    /// ([`crate::tools::layout::resolve`]).
    pub layout: CallLayout,
    /// Reasoning-block markers the template uses (`<think>`…`</think>`), if any: the
    /// block is split off into `reasoning_content`, never content.
    pub reasoning: Option<(&'static str, &'static str)>,
    /// The gate of the model's own template, when the generic fallback replaced it.
    pub native_report: Option<ProbeReport>,
    /// Read near-miss calls in `auto` (a bare or fenced JSON call of a declared tool:
    /// [`crate::tools::recovery`]); on by default, `--call-recovery off` turns it off.
    pub call_recovery: bool,
    /// Extra stop strings the template declares (its `stop_strings` metadata:
    /// [`super::metadata`]), added to every turn's.
    pub stop_strings: Vec<String>,
}

impl ChatSetup {
    /// The tool-call family the template writes: the name of [`Self::layout`] (an
    /// override's family, `derived`, or `unknown`).
    pub fn family(&self) -> &str {
        &self.layout.family
    }

    /// Turn call recovery in `auto` on or off (see [`ChatSetup::call_recovery`]).
    ///
    /// ```
    /// # use toolgate::template::{source::GgufTemplates, gate, ToolFallback};
    /// let setup = gate("m", &GgufTemplates::default(), None, None, ToolFallback::Generic)?;
    /// assert!(setup.call_recovery && !setup.with_call_recovery(false).call_recovery);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn with_call_recovery(mut self, on: bool) -> Self {
        self.call_recovery = on;
        self
    }

    /// Read and write tool calls in `family`'s format instead of the one derived from
    /// the template (`--tool-format`), for a template whose calls derivation cannot
    /// read or gets wrong.
    ///
    /// ```
    /// # use toolgate::template::{source::GgufTemplates, gate, ToolFallback};
    /// let setup = gate("m", &GgufTemplates::default(), None, None, ToolFallback::Generic)?;
    /// assert_eq!(setup.with_family("hermes")?.family(), "hermes");
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] when toolgate has no format file for `family` (the
    /// message lists those it has).
    pub fn with_family(mut self, family: &str) -> Result<Self> {
        self.layout = CallLayout::from_flag(family)?;
        Ok(self)
    }
}

/// Probe without judging: the effective template, its report and family.
///
/// # Errors
/// [`Error::Template`] if the chosen template does not parse; [`Error::Io`] for an
/// unreadable override.
pub fn inspect(templates: &GgufTemplates, arch: Option<&str>, override_path: Option<&Path>) -> Result<ChatSetup> {
    let (template, source) = source::select(templates, override_path)?;
    Ok(setup(template, source, arch, None))
}

fn setup(template: ChatTemplate, source: TemplateSource, arch: Option<&str>, native: Option<ProbeReport>) -> ChatSetup {
    let report = probe(&template);
    let signals = transform::signals(template.source());
    let has_template = !matches!(source, TemplateSource::ChatMlDefault);
    let policy = transform::policy(report.caps.supports_system_role, signals, arch, has_template);
    let marker_family =
        if source == TemplateSource::GenericFallback { "generic" } else { super::family::detect(&template) };
    let object_arguments = report.caps.supports_object_arguments;
    // A template's own metadata names its call layout; otherwise it is derived.
    let metadata = super::metadata::read(&template);
    let layout = match metadata.as_ref().map(|m| m.format()) {
        Ok(Some(format)) => layout::from_metadata(&template, object_arguments, format),
        Ok(None) => resolve(&template, object_arguments, marker_family),
        Err(e) => CallLayout::unusable(format!("failed: {e}")),
    };
    let stop_strings = metadata.map(|m| m.stop_strings).unwrap_or_default();
    let reasoning = super::family::reasoning_markers(template.source());
    ChatSetup {
        template,
        source,
        report,
        signals,
        policy,
        layout,
        reasoning,
        native_report: native,
        call_recovery: true,
        stop_strings,
    }
}

/// Choose, probe and judge the template of model `model_id`.
///
/// # Errors
/// [`Error::NotToolCapable`] when the effective template lacks `supports_tools &&
/// supports_tool_calls` and `fallback` is [`ToolFallback::None`]; template and I/O
/// errors as [`inspect`].
pub fn gate(
    model_id: &str,
    templates: &GgufTemplates,
    arch: Option<&str>,
    override_path: Option<&Path>,
    fallback: ToolFallback,
) -> Result<ChatSetup> {
    let native = inspect(templates, arch, override_path)?;
    if native.report.caps.tool_capable() {
        return Ok(native);
    }
    match fallback {
        ToolFallback::Generic => {
            let (template, source) = source::generic()?;
            let s = setup(template, source, arch, Some(native.report));
            debug_assert!(s.report.caps.tool_capable(), "the generic template must pass the prober");
            Ok(s)
        }
        ToolFallback::None => Err(Error::NotToolCapable(refusal(model_id, &native))),
    }
}

fn refusal(model_id: &str, s: &ChatSetup) -> String {
    let c = &s.report.caps;
    let failing = if !c.supports_tools { "supports_tools" } else { "supports_tool_calls" };
    format!(
        "Model {model_id} rejected: its chat template does not support tool calling (supports_tools={}, supports_tool_calls={}). \
         toolgate only loads tool-capable models. Template: {}. Probe: {failing}: {}. \
         Use --tool-fallback generic to serve it with toolgate's generic tool template, or --chat-template FILE.",
        c.supports_tools, c.supports_tool_calls, s.source, s.report.reasons[failing]
    )
}
