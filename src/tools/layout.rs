//! Which call layout a model is served with ([`resolve`]): derived from its template
//! ([`super::derive`]), a tested file of `grammars/` that reads the template's own
//! calls, the template's metadata, or `--tool-format` — with the evidence for the
//! choice ([`CallLayout`]).

use super::conformance::conformance;
use super::derive::{derive, probe_sample};
use super::format::{ArgsDialect, BodyKind, ToolFormat};
use crate::template::ChatTemplate;

/// How a model's call layout was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Read off the template ([`derive()`]).
    Derived,
    /// A tested file of `grammars/` that reads the template's own calls (or, for a
    /// template that renders none, whose markers the template names).
    Override,
    /// `--tool-format`: the user's choice, not checked against the template.
    Flag,
    /// The template's own metadata (`tool_start`, `tool_end`:
    /// [`crate::template::metadata`]), which wins over derivation.
    Metadata,
    /// No layout: requests with tools are refused with the reason.
    None,
}

/// The call layout a model is served with, and the evidence for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallLayout {
    /// The layout; `None` when none could be had (see `reason`).
    #[serde(skip)]
    pub format: Option<ToolFormat>,
    /// Its family: an override's name, `derived`, or `unknown`.
    pub family: String,
    /// How it was chosen.
    pub origin: Origin,
    /// The round trip: `passed`, or why it failed or was not run.
    pub round_trip: String,
    /// The template renders two calls in one turn.
    pub parallel: bool,
    /// The call text the template wrote for the probe calls, when it wrote some.
    pub sample: Option<String>,
    /// Earlier calls go to the template with their arguments as JSON strings, although
    /// it reads objects: what it writes for objects is no call layout (Apriel 1.5
    /// prints an object through `|string` as a Python dict inside its JSON calls),
    /// while string arguments render as the JSON its instructions ask for.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub string_arguments: bool,
    /// What the template writes after a call turn's calls, up to the end of
    /// generation: the turn's end marker (`<|im_end|>`), where a model stops. Output
    /// that ends with it, or with a prefix of it, still holds valid calls
    /// ([`super::conformance::check_calls`]). Empty when unknown.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub turn_end: String,
}

impl CallLayout {
    /// The layout `family`'s file gives, as `--tool-format` chooses it (no check).
    ///
    /// # Errors
    /// [`crate::Error::InvalidParameter`] when `grammars/` has no such family (the
    /// message lists those it has).
    pub fn from_flag(family: &str) -> crate::Result<Self> {
        let formats = super::format::all()?;
        let Some(f) = formats.iter().find(|f| f.family == family) else {
            return Err(crate::Error::InvalidParameter {
                name: "tool-format",
                reason: format!(
                    "no tool-call format `{family}` (formats: {})",
                    formats.iter().map(|f| f.family.as_str()).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        Ok(Self {
            format: Some(f.clone()),
            family: family.to_string(),
            origin: Origin::Flag,
            round_trip: "not checked: chosen with --tool-format".into(),
            parallel: true,
            sample: None,
            string_arguments: false,
            turn_end: String::new(),
        })
    }

    /// No layout, for `reason`: requests with tools are refused with it.
    pub(crate) fn unusable(reason: String) -> Self {
        Self {
            format: None,
            family: "unknown".into(),
            origin: Origin::None,
            round_trip: reason,
            parallel: false,
            sample: None,
            string_arguments: false,
            turn_end: String::new(),
        }
    }

    fn with(format: ToolFormat, origin: Origin, round_trip: String, parallel: bool, sample: Option<String>) -> Self {
        let family = format.family.clone();
        let turn_end = String::new();
        Self { family, format: Some(format), origin, round_trip, parallel, sample, string_arguments: false, turn_end }
    }

    fn ending(self, turn_end: String) -> Self {
        Self { turn_end, ..self }
    }
}

/// The layout a template's metadata names (`format`, from
/// [`crate::template::metadata`]), checked against the calls the template renders for
/// the probe tools: the round trip is reported, and the metadata wins either way (it is
/// the template author's word, as `--tool-format` is the user's).
///
/// Cost: the renders of [`derive()`] and one [`conformance`] check.
pub fn from_metadata(template: &ChatTemplate, object_arguments: bool, format: ToolFormat) -> CallLayout {
    let (round_trip, parallel, sample, turn_end) = match probe_sample(template, object_arguments) {
        Ok((sample, parallel, turn_end)) => {
            let check =
                conformance(&format, &sample, parallel).map_or_else(|e| format!("failed: {e}"), |()| "passed".into());
            (check, parallel, Some(sample), turn_end)
        }
        Err(e) => (format!("not checked: {e}"), true, None, String::new()),
    };
    CallLayout::with(format, Origin::Metadata, round_trip, parallel, sample).ending(turn_end)
}

/// Choose the call layout for `template`: derive it ([`derive()`]); a `grammars/` file
/// whose markers the template names (`marker_family`, from
/// [`crate::template::family::detect`]) is used instead when it reads the template's
/// own calls (it carries tested tolerances, such as optional newlines); for a template
/// that renders no calls, that file is used unchecked; otherwise there is no layout,
/// and the reason says what could not be derived. A template that reads object
/// arguments but lays them out in no readable way is tried again with string arguments
/// (see [`CallLayout::string_arguments`]); that retry counts only when its calls read
/// back.
///
/// Cost: [`derive()`], and one [`conformance`] check per candidate file (twice for the
/// retry).
pub fn resolve(template: &ChatTemplate, object_arguments: bool, marker_family: &str) -> CallLayout {
    let layout = resolve_with(template, object_arguments, marker_family);
    let python_dict = layout.format.as_ref().is_some_and(|f| f.dialect == ArgsDialect::PythonDict);
    if python_dict && object_arguments {
        return json_history(template, marker_family, layout);
    }
    if layout.format.is_some() || !object_arguments {
        return layout;
    }
    match resolve_with(template, false, marker_family) {
        // Only a layout checked against the calls string arguments render: one taken
        // unchecked (the template renders no call then) is no evidence against the
        // calls it rendered for objects, which no layout read (MiniMax M3's).
        retry @ CallLayout { format: Some(_), .. } if retry.round_trip == "passed" => CallLayout {
            round_trip: format!(
                "{}, with arguments passed as JSON strings (with objects: {})",
                retry.round_trip, layout.round_trip
            ),
            string_arguments: true,
            ..retry
        },
        _ => layout,
    }
}

/// A template that prints arguments passed as objects as Python's `repr` of a dict
/// (`{{ arguments }}`; `layout` read them so) prints arguments passed as a JSON string
/// as that JSON: the prompt gives it strings, so the model's earlier calls show as the
/// JSON such templates ask for, while the grammar and parser keep `layout`'s dialect,
/// which admits the `repr` too (what Hugging Face and vLLM, passing objects, show the
/// model). `layout` as it is where the strings' calls do not read back as JSON.
fn json_history(template: &ChatTemplate, marker_family: &str, layout: CallLayout) -> CallLayout {
    let retry = resolve_with(template, false, marker_family);
    match retry.format {
        Some(f)
            if retry.round_trip == "passed"
                && f.dialect == ArgsDialect::Json
                && f.body == BodyKind::JsonNameArguments =>
        {
            CallLayout {
                format: Some(ToolFormat { dialect: ArgsDialect::PythonDict, ..f }),
                round_trip: "passed, with arguments passed as JSON strings (as objects they print as Python's repr \
                             of a dict, which the grammar admits too)"
                    .into(),
                string_arguments: true,
                ..retry
            }
        }
        _ => layout,
    }
}

/// `over` with the spelling `derived` read off the template: its key order, and its
/// JSON spacing where both write JSON arguments.
fn spelled_as(mut over: ToolFormat, derived: &ToolFormat) -> ToolFormat {
    if over.dialect == ArgsDialect::Json && derived.dialect == ArgsDialect::Json {
        over.spacing = derived.spacing;
    }
    over.key_order = derived.key_order;
    over
}

fn resolve_with(template: &ChatTemplate, object_arguments: bool, marker_family: &str) -> CallLayout {
    let over = super::format::for_family(marker_family).ok().flatten();
    match derive(template, object_arguments) {
        // An override that reads the template's calls takes their JSON spelling from
        // the template too.
        Ok(d) => match over.map(|o| spelled_as(o, &d.format)).filter(|o| conformance(o, &d.sample, d.parallel).is_ok())
        {
            Some(o) => CallLayout::with(o, Origin::Override, "passed".into(), d.parallel, Some(d.sample)),
            None => CallLayout::with(d.format, Origin::Derived, "passed".into(), d.parallel, Some(d.sample)),
        }
        .ending(d.turn_end),
        Err(e) => match (over, e.sample) {
            (Some(o), None) => {
                let note = format!("not checked: the template shows no calls ({})", e.reason);
                CallLayout::with(o, Origin::Override, note, true, None)
            }
            (Some(o), Some(sample)) => match conformance(&o, &sample, false) {
                Ok(()) => {
                    CallLayout::with(o, Origin::Override, "passed".into(), false, Some(sample)).ending(e.turn_end)
                }
                Err(why) => CallLayout {
                    format: None,
                    family: "unknown".into(),
                    origin: Origin::None,
                    round_trip: format!(
                        "failed: {}; the `{}` format does not read them either: {why}",
                        e.reason, o.family
                    ),
                    parallel: false,
                    sample: Some(sample),
                    string_arguments: false,
                    turn_end: String::new(),
                },
            },
            (None, sample) => CallLayout {
                format: None,
                family: "unknown".into(),
                origin: Origin::None,
                round_trip: format!("failed: {}", e.reason),
                parallel: false,
                sample,
                string_arguments: false,
                turn_end: String::new(),
            },
        },
    }
}
