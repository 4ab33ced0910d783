//! Tool-call formats, one data file per family in `grammars/*.json`.
//!
//! A format says how a family writes calls: the markers around each call, the
//! separator between parallel calls, and the body's shape. Adding a family is adding a
//! file (and a test); `build.rs` embeds every file.

use serde::Deserialize;

use crate::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/formats.rs"));

/// The shape of one call's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyKind {
    /// `{"<name_key>": "NAME", "<arguments_key>": {…}}` in JSON.
    JsonNameArguments,
}

/// How one family writes tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ToolFormat {
    /// Family name (as [`crate::template::family`] detects it).
    pub family: String,
    /// Human description.
    pub description: String,
    /// Text that opens a call (a special token if the vocabulary has one with this text).
    pub call_start: String,
    /// Text that closes a call.
    pub call_end: String,
    /// Text between parallel calls (optional when generating).
    pub separator: String,
    /// Allow a newline after `call_start` and before `call_end`.
    pub inner_newlines: bool,
    /// Body shape.
    pub body: BodyKind,
    /// Key of the function name.
    pub name_key: String,
    /// Key of the arguments.
    pub arguments_key: String,
}

/// All embedded formats.
///
/// # Errors
/// [`Error::InvalidParameter`] if a format file is malformed (a build-time mistake the
/// tests catch).
pub fn all() -> Result<Vec<ToolFormat>> {
    FORMAT_FILES
        .iter()
        .map(|(name, text)| {
            serde_json::from_str(text)
                .map_err(|e| Error::InvalidParameter { name: "grammars", reason: format!("grammars/{name}: {e}") })
        })
        .collect()
}

/// The format of `family`, if toolgate has one.
///
/// ```
/// let f = toolgate::tools::format::for_family("hermes")?.unwrap();
/// assert_eq!(f.call_start, "<tool_call>");
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// # Errors
/// As [`all`].
pub fn for_family(family: &str) -> Result<Option<ToolFormat>> {
    Ok(all()?.into_iter().find(|f| f.family == family))
}
