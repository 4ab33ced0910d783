//! Tool-call formats, one data file per family in `grammars/*.json`.
//!
//! A format says how a family writes calls, as four nested layers:
//!
//! 1. an optional **section** (`section_start` … `section_end`) that holds all the calls
//!    of a turn, such as DeepSeek's `<｜tool▁calls▁begin｜>` … `<｜tool▁calls▁end｜>`;
//!    with `list: true` the calls inside it form a JSON array (Mistral Nemo's
//!    `[TOOL_CALLS][{…}, {…}]`);
//! 2. each **call** between `call_start` and `call_end` (either may be empty, the end
//!    then being where the body's value ends), calls separated by `separator`;
//! 3. the **body** ([`BodyKind`]): one JSON object naming the function and holding its
//!    arguments (`{"name": …, "arguments": {…}}`), or the name as text followed by
//!    `name_end` and the arguments value (`<function=NAME>{…}</function>`);
//! 4. the arguments' **dialect** ([`ArgsDialect`]): JSON, Gemma 4's native syntax,
//!    tagged parameters, Python keyword arguments or (in a JSON body) a Python dict,
//!    one file each in `tools::dialect`.
//!
//! The same description drives the constrained grammar ([`super::calls_grammar`]) and
//! the parser ([`super::stream::StreamParser`]). Adding a family is adding a file (and
//! a test); `build.rs` embeds every file.

use serde::Deserialize;

use crate::grammar::regex::Spacing;
use crate::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/formats.rs"));

/// How a tagged-parameters layout spells one parameter: `key_start KEY key_end VALUE
/// value_end`, repeated, then `end`. Qwen3-Coder's `<parameter=KEY>VALUE</parameter>`
/// … `</function>` is the default; GLM's `<arg_key>KEY</arg_key><arg_value>VALUE
/// </arg_value>` (no `end`: the arguments end where no further key starts), MiniMax's
/// `<parameter name="KEY">VALUE</parameter>`, layouts that mark a value's type in
/// the key's tag (DeepSeek DSML's `string="true"` / `string="false"`: a different
/// `key_end_json` for values written as JSON), and layouts whose closing tag repeats
/// the key (MiniMax M3's `<KEY>VALUE</KEY>`, each tag after a vendor token: a
/// `value_end` with [`KEY_SLOT`]) are others.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamTags {
    /// Text before a parameter's name.
    pub key_start: String,
    /// Text between the name and a string value (bare text).
    pub key_end: String,
    /// Text between the name and a value written as JSON (`None`: `key_end`). Where it
    /// holds [`TYPE_SLOT`], the value's JSON type goes there (`number` for integers
    /// too, `boolean`, `null`, `object`, `array`): Kimi K3's `" type="{type}"<|sep|>`
    /// beside `" type="string"<|sep|>` for bare text.
    #[serde(default)]
    pub key_end_json: Option<String>,
    /// Text after a value; where it holds [`KEY_SLOT`], the parameter's name goes
    /// there ([`ParamTags::value_end_for`]).
    pub value_end: String,
    /// Text after the last parameter (`""`: none).
    #[serde(default)]
    pub end: String,
}

impl Default for ParamTags {
    fn default() -> Self {
        Self {
            key_start: "<parameter=".into(),
            key_end: ">".into(),
            key_end_json: None,
            value_end: "</parameter>".into(),
            end: "</function>".into(),
        }
    }
}

/// Gemma 4's string quote, a control token of its vocabulary: what the
/// [`ArgsDialect::Gemma4`] dialect quotes strings with where a layout's
/// [`ToolFormat::string_quote`] is empty (FunctionGemma's templates quote with
/// `<escape>`).
pub const GEMMA4_QUOTE: &str = "<|\"|>";

/// Where a [`ParamTags::key_end_json`] names the value's JSON type.
pub const TYPE_SLOT: &str = "{type}";

/// Where a [`ParamTags::value_end`] repeats the parameter's name (`</{key}>`).
pub const KEY_SLOT: &str = "{key}";

/// The JSON types a typed key end names for values written as JSON.
pub(crate) const JSON_TYPES: [&str; 5] = ["number", "boolean", "null", "object", "array"];

impl ParamTags {
    /// The text after parameter `key`'s value: [`ParamTags::value_end`], with `key` in
    /// its [`KEY_SLOT`] if it has one.
    ///
    /// ```
    /// use toolgate::tools::format::ParamTags;
    /// let tags = ParamTags { key_start: "<".into(), key_end: ">".into(), value_end: "</{key}>".into(), ..Default::default() };
    /// assert_eq!(tags.value_end_for("city"), "</city>");
    /// assert_eq!(ParamTags::default().value_end_for("city"), "</parameter>");
    /// ```
    ///
    /// Cost: a copy of the text where it has the slot; none otherwise (the parser
    /// asks once per parameter read).
    pub fn value_end_for(&self, key: &str) -> std::borrow::Cow<'_, str> {
        match self.keyed_end() {
            true => self.value_end.replace(KEY_SLOT, key).into(),
            false => self.value_end.as_str().into(),
        }
    }

    /// Whether the closing tag repeats the parameter's name ([`KEY_SLOT`]): such a layout
    /// cannot admit undeclared parameters in a grammar (their closing tag would have
    /// to repeat a name the grammar does not know).
    pub fn keyed_end(&self) -> bool {
        self.value_end.contains(KEY_SLOT)
    }

    /// The text between a name and a value written as JSON (with [`TYPE_SLOT`] if typed).
    pub fn key_end_json(&self) -> &str {
        self.key_end_json.as_deref().unwrap_or(&self.key_end)
    }

    /// Every text that may end a key: `key_end`, then `key_end_json` (once per JSON
    /// type where it is typed), each with whether it introduces bare text.
    pub fn key_ends(&self) -> Vec<(String, bool)> {
        let mut out = vec![(self.key_end.clone(), true)];
        let json = self.key_end_json();
        match json.split_once(TYPE_SLOT) {
            Some((a, b)) => out.extend(JSON_TYPES.iter().map(|t| (format!("{a}{t}{b}"), false))),
            None if json != self.key_end => out.push((json.to_string(), false)),
            None => out[0].1 = false,
        }
        out
    }
}

/// The shape of one call's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyKind {
    /// `{"<name_key>": "NAME", "<arguments_key>": {…}}` in JSON (other keys, such as an
    /// `id`, are read and ignored; generation writes these two).
    JsonNameArguments,
    /// `NAME` (optionally `NAME<name_index_separator>INDEX`, or the call's id in place
    /// of the index: [`IdSlot`]), then `name_end`, then the
    /// arguments value. With an empty `name_end` the name is the run of identifier
    /// characters (`A–Z a–z 0–9 _ . -`) before the value.
    NameThenArguments,
}

/// How the arguments value is spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgsDialect {
    /// RFC 8259 JSON, passed to the client as written.
    #[default]
    Json,
    /// Gemma's native syntax (`{city:<|"|>Paris<|"|>,n:2}`; the quote token is
    /// [`ToolFormat::string_quote`]), converted to JSON for the client
    /// (`tools::dialect::gemma4`).
    Gemma4,
    /// Tagged parameters: Qwen3-Coder's `<parameter=city>\nParis\n</parameter>`… then
    /// `</function>` by default, or the spelling in [`ToolFormat::params`] (GLM's
    /// `<arg_key>`/`<arg_value>`, MiniMax's `<parameter name="…">`); strings as bare
    /// text, other values as JSON; converted to a JSON object for the client, with the
    /// declared types deciding what is a string.
    XmlParameters,
    /// Python keyword arguments (`(city="Paris", n=2, ok=True)`), as pythonic calls
    /// write them (LFM2); converted to a JSON object for the client.
    Python,
    /// The arguments of a JSON body as Jinja prints a mapping: Python's `repr`
    /// (`{'city': 'Paris', 'n': 2, 'ok': True}`), what a template that writes
    /// `{{ call.function.arguments }}` renders for arguments passed as objects (vLLM's
    /// Phi-4-mini example); JSON is admitted beside it (what the same template renders
    /// for arguments passed as a string). Converted to JSON for the client
    /// (`tools::dialect::python_dict`).
    PythonDict,
}

/// Spellings of [`ArgsDialect::Python`] keyword arguments that are not Python, which
/// a template prints when it writes values with `{{ value }}` rather than as literals
/// (vLLM's example templates for Llama 3.2, Llama 4, ToolACE and Gemma 3). A model
/// shown its past calls so may write them so; the grammar admits each quirk beside
/// Python's own spelling (which the template's instructions ask for), and the parser
/// reads both back, the tool's declared types deciding what a value is. Derivation
/// sets the quirks the template's render needs ([`crate::tools::derive`]); the default
/// is none.
///
/// ```
/// use toolgate::tools::format::PythonQuirks;
/// let q: PythonQuirks = serde_json::from_str(r#"{"bare_strings": true}"#)?;
/// assert!(q.bare_strings && !q.quoted_scalars && !q.no_commas);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonQuirks {
    /// A string parameter's value without quotes, up to the next `,` or `)`
    /// (`city=Paris`: `{{ value }}`).
    #[serde(default)]
    pub bare_strings: bool,
    /// A number's, boolean's or null's value in quotes (`days="3"`, `ok="True"`:
    /// `"{{ value }}"`). The one quirk the [`ArgsDialect::Gemma4`] dialect has too: a
    /// template that prints every value between its string quotes
    /// (`days:<escape>3<escape>`, `ok:<escape>True<escape>`, a list as Python's
    /// `repr`: vLLM's FunctionGemma example) has a declared parameter's non-string
    /// value admitted so beside Gemma's own spelling.
    #[serde(default)]
    pub quoted_scalars: bool,
    /// No comma between arguments (`city="Paris"days=3`).
    #[serde(default)]
    pub no_commas: bool,
}

impl PythonQuirks {
    /// Every combination of quirks, fewest first: what derivation tries in turn.
    pub(crate) fn all() -> impl Iterator<Item = PythonQuirks> {
        let mut all: Vec<PythonQuirks> = (0..8u8)
            .map(|b| PythonQuirks { bare_strings: b & 1 != 0, quoted_scalars: b & 2 != 0, no_commas: b & 4 != 0 })
            .collect();
        all.sort_by_key(|q| q.count());
        all.into_iter()
    }

    fn count(&self) -> u8 {
        self.bare_strings as u8 + self.quoted_scalars as u8 + self.no_commas as u8
    }
}

/// The shape of the call ids toolgate gives a family's calls (they come back to the
/// template in the next turn, and some templates check them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallIds {
    /// OpenAI's `call_` followed by 12 hex digits.
    #[default]
    Openai,
    /// Nine ASCII letters and digits (Mistral's templates refuse any other length).
    Alnum9,
    /// `functions.NAME:INDEX`, Kimi's: its templates write the id where the call's name
    /// goes.
    FunctionsIndex,
}

/// Where a name-then-arguments call writes its id ([`ToolFormat::id_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdSlot {
    /// Nowhere (the default).
    #[default]
    None,
    /// After the name's index separator, in place of a call index: Mistral Small 3.2's
    /// `NAME[CALL_ID]Xq7Rk2Pz9[ARGS]` (`name_index_separator` `[CALL_ID]`).
    AfterName,
    /// Between the call start and the name's prefix: Solar Open's
    /// `<|tool_call:begin|>ID<|tool_call:name|>NAME` (`name_prefix`
    /// `<|tool_call:name|>`).
    BeforeName,
}

/// The order a call's argument keys are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOrder {
    /// The schema's `properties` order (what a template that prints the arguments as
    /// given renders: the model wrote them so). The default.
    #[default]
    Schema,
    /// Names sorted case-insensitively at every depth, as Jinja's `dictsort` orders
    /// them (Gemma 4's templates print arguments so): see
    /// [`Node::sort_keys`](crate::grammar::ir::Node::sort_keys).
    Sorted,
}

/// How one family writes tool calls. See the [module docs](self) for the layers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFormat {
    /// Family name (as [`crate::template::family`] detects it).
    pub family: String,
    /// Human description.
    pub description: String,
    /// Text that opens the section of calls (`""`: no section). A special token if the
    /// vocabulary has one with this text (markers may mix special tokens and text).
    #[serde(default)]
    pub section_start: String,
    /// Text that closes the section (`""`: the section ends after its last call).
    #[serde(default)]
    pub section_end: String,
    /// The section holds a JSON array of calls (`[` call `,` call … `]`).
    #[serde(default)]
    pub list: bool,
    /// Text that opens a call.
    #[serde(default)]
    pub call_start: String,
    /// For a format whose calls have no marker at all (Llama 3's bare
    /// `{"name": …, "parameters": …}`): the start of a call's body that marks a call in
    /// free text (`{"name"`). It is part of the body, not consumed as a marker.
    #[serde(default)]
    pub body_trigger: String,
    /// Text that closes a call (`""`: the call ends with its value).
    #[serde(default)]
    pub call_end: String,
    /// Text between parallel calls (optional when generating).
    #[serde(default)]
    pub separator: String,
    /// Allow a newline inside the markers (after a start, before an end).
    #[serde(default)]
    pub inner_newlines: bool,
    /// Body shape.
    pub body: BodyKind,
    /// Key of the function name ([`BodyKind::JsonNameArguments`]).
    #[serde(default = "default_name_key")]
    pub name_key: String,
    /// Key of the arguments ([`BodyKind::JsonNameArguments`]).
    #[serde(default = "default_arguments_key")]
    pub arguments_key: String,
    /// Text before the name, after the call start, whitespace allowed before it
    /// ([`BodyKind::NameThenArguments`]; Qwen3-Coder's `<function=`).
    #[serde(default)]
    pub name_prefix: String,
    /// Text between the name and the arguments ([`BodyKind::NameThenArguments`]).
    #[serde(default)]
    pub name_end: String,
    /// After `name_end`, the name once more and then this text: a layout that names
    /// the call in a header and again in its body (Muse Glimmer's
    /// `to=NAME<|message|><atem:function_calls>\n<atem:invoke name="NAME">`, `name_end`
    /// the text between the two names, this `">`). `""`: the name is written once.
    #[serde(default)]
    pub name_again: String,
    /// Kimi-K2 style `NAME:0`: the separator before a call index that follows the name
    /// (`""`: none).
    #[serde(default)]
    pub name_index_separator: String,
    /// Where a name-then-arguments call writes its id (matching `id_pattern`), if it
    /// does. The parser reads and drops it, ids being toolgate's own ([`CallIds`]).
    #[serde(default)]
    pub id_slot: IdSlot,
    /// Dialect of the arguments.
    #[serde(default)]
    pub dialect: ArgsDialect,
    /// Key of a call id the model writes after the arguments in a JSON body (Mistral
    /// Nemo's `"id"`; `""`: none). Generation may write it (matching `id_pattern`); the
    /// parser ignores it, ids being toolgate's own ([`CallIds`]).
    #[serde(default)]
    pub id_key: String,
    /// Regex of the id under `id_key`.
    #[serde(default)]
    pub id_pattern: String,
    /// The id member comes first in the body (Command R7B's `{"tool_call_id": "0",
    /// "tool_name": …}`), not after the arguments.
    #[serde(default)]
    pub id_first: bool,
    /// The shape of the call ids toolgate returns.
    #[serde(default)]
    pub call_ids: CallIds,
    /// A JSON body holds the name and arguments in a `function` object, as OpenAI's
    /// `tool_calls` items do: `{"id": …, "type": "function", "function": {"name": …,
    /// "arguments": {…}}}` (templates with TabbyAPI-style metadata). The parser reads
    /// such a body, and a flat one, for every JSON-body layout.
    #[serde(default)]
    pub nested_function: bool,
    /// The [`ArgsDialect::Python`] dialect writes strings in single quotes, as Python's
    /// `repr` does (`city='Oslo'`: LFM2.5), not double quotes (`city="Oslo"`).
    #[serde(default)]
    pub single_quotes: bool,
    /// How the template spells [`ArgsDialect::Python`] arguments unlike Python
    /// (`city=Paris`, `days="3"`, no comma between arguments): the grammar admits that
    /// spelling beside Python's, and the parser reads both back.
    #[serde(default)]
    pub python_quirks: PythonQuirks,
    /// The control token the [`ArgsDialect::Gemma4`] dialect puts around strings
    /// (`""`: Gemma 4's `<|"|>`); FunctionGemma's templates quote with `<escape>`
    /// (`{city:<escape>Oslo<escape>}`). See [`Self::gemma_quote`].
    #[serde(default)]
    pub string_quote: String,
    /// What the JSON of a call (a JSON body's members, [`ArgsDialect::Json`]
    /// arguments) writes after `:` and `,`: [`Spacing::Optional`] (the default) lets
    /// the model choose; a derived layout takes the spelling its template renders
    /// calls with, so the grammar forces it (and jump-forward feeds it).
    #[serde(default)]
    pub spacing: Spacing,
    /// The order the grammar writes each object's declared keys in: a derived layout
    /// takes the order its template renders a call's arguments in (an override that
    /// reads the template's calls too), so the model writes the keys in the order it
    /// was trained on. Every order is read back.
    #[serde(default)]
    pub key_order: KeyOrder,
    /// The generation prompt ends with the calls' opening marker ([`Self::trigger`]),
    /// so the model's output starts after it, inside the first call: Functionary
    /// v3.2's prompt ends with `>>>`, and the model writes `NAME\n{…}` or
    /// [`Self::text_start`] and its text. The engine (where its prompt does end with
    /// the marker) and [`crate::template::probe::read_output`] read the output as if the marker
    /// came first; a constraint starts with the marker already read.
    #[serde(default)]
    pub prompt_opens_call: bool,
    /// What follows the trigger where the model writes text instead of a call
    /// (Functionary v3.2's `all\n`, as in `>>>all\nSure.`): the trigger and this are
    /// dropped from the content wherever they appear, and a lazy constraint stays off
    /// for them. `""`: the trigger always opens calls.
    #[serde(default)]
    pub text_start: String,
    /// How the [`ArgsDialect::XmlParameters`] dialect spells a parameter (`None`:
    /// Qwen3-Coder's `<parameter=KEY>`…`</parameter>`, then `</function>`).
    #[serde(default)]
    pub params: Option<ParamTags>,
}

fn default_name_key() -> String {
    "name".into()
}

fn default_arguments_key() -> String {
    "arguments".into()
}

impl ToolFormat {
    /// A layout with no markers yet: a JSON body `{"name": …, "arguments": {…}}`,
    /// everything else empty or off. The start of a layout built in code (derived, or
    /// recovery's); not valid until it has a marker or a body trigger.
    ///
    /// ```
    /// let f = toolgate::tools::format::ToolFormat::json_body("mine", "an example");
    /// assert_eq!((f.name_key.as_str(), f.arguments_key.as_str(), f.trigger()), ("name", "arguments", ""));
    /// ```
    pub fn json_body(family: &str, description: &str) -> Self {
        Self {
            family: family.into(),
            description: description.into(),
            section_start: String::new(),
            section_end: String::new(),
            list: false,
            call_start: String::new(),
            body_trigger: String::new(),
            call_end: String::new(),
            separator: String::new(),
            inner_newlines: false,
            body: BodyKind::JsonNameArguments,
            name_key: default_name_key(),
            arguments_key: default_arguments_key(),
            name_prefix: String::new(),
            name_end: String::new(),
            name_again: String::new(),
            name_index_separator: String::new(),
            id_slot: IdSlot::None,
            dialect: ArgsDialect::Json,
            id_key: String::new(),
            id_pattern: String::new(),
            id_first: false,
            call_ids: CallIds::Openai,
            single_quotes: false,
            python_quirks: PythonQuirks::default(),
            string_quote: String::new(),
            spacing: Spacing::Optional,
            key_order: KeyOrder::Schema,
            prompt_opens_call: false,
            text_start: String::new(),
            nested_function: false,
            params: None,
        }
    }

    /// The quote token of [`ArgsDialect::Gemma4`] strings: [`Self::string_quote`], or
    /// Gemma 4's `<|"|>` where that is empty.
    ///
    /// ```
    /// let f = toolgate::tools::format::for_family("gemma4")?.unwrap();
    /// assert_eq!(f.gemma_quote(), "<|\"|>");
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn gemma_quote(&self) -> &str {
        match self.string_quote.as_str() {
            "" => GEMMA4_QUOTE,
            q => q,
        }
    }

    /// The spelling of tagged parameters ([`ArgsDialect::XmlParameters`]).
    pub fn param_tags(&self) -> std::borrow::Cow<'_, ParamTags> {
        match &self.params {
            Some(p) => std::borrow::Cow::Borrowed(p),
            None => std::borrow::Cow::Owned(ParamTags::default()),
        }
    }

    /// The text whose appearance in free output means calls begin: the section start,
    /// the call start for formats without a section, or the body trigger for formats
    /// without markers.
    ///
    /// ```
    /// let f = toolgate::tools::format::for_family("deepseek-v3.1")?.unwrap();
    /// assert_eq!(f.trigger(), "<｜tool▁calls▁begin｜>");
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn trigger(&self) -> &str {
        [&self.section_start, &self.call_start, &self.body_trigger]
            .into_iter()
            .find(|m| !m.is_empty())
            .map_or("", String::as_str)
    }

    /// Whether the trigger is the start of a call's body (see [`Self::body_trigger`]).
    pub fn trigger_in_body(&self) -> bool {
        self.section_start.is_empty() && self.call_start.is_empty()
    }

    /// Whether the section start already opens the list of calls (`functools[`), so
    /// the `[` is part of the trigger rather than the list.
    pub fn start_opens_list(&self) -> bool {
        self.list && self.section_start.ends_with('[')
    }

    /// Whether calls sit inside a section.
    pub fn has_section(&self) -> bool {
        !self.section_start.is_empty()
    }

    /// Check the combinations the parser and grammar rely on.
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        if self.trigger().is_empty() {
            return Err("needs a section_start, call_start or body_trigger to recognise calls by".into());
        }
        if self.list && (!self.has_section() || self.body != BodyKind::JsonNameArguments) {
            return Err("`list` needs a section_start and a json_name_arguments body".into());
        }
        if self.id_first && self.id_key.is_empty() {
            return Err("`id_first` needs an `id_key`".into());
        }
        if !self.id_key.is_empty() && (self.body != BodyKind::JsonNameArguments || self.id_pattern.is_empty()) {
            return Err("`id_key` needs a json_name_arguments body and an `id_pattern`".into());
        }
        if matches!(self.dialect, ArgsDialect::XmlParameters | ArgsDialect::Python)
            && self.body != BodyKind::NameThenArguments
        {
            return Err("this dialect needs a name_then_arguments body".into());
        }
        // The marker right after the id, which ends it.
        let after_id = match self.id_slot {
            IdSlot::None => None,
            IdSlot::AfterName => Some(&self.name_index_separator),
            IdSlot::BeforeName => Some(&self.name_prefix),
        };
        if after_id.is_some_and(|m| m.is_empty() || self.id_pattern.is_empty())
            || self.id_slot != IdSlot::None && self.body != BodyKind::NameThenArguments
        {
            return Err("`id_slot` needs a name_then_arguments body, an `id_pattern`, and a marker after the \
                        id (`name_index_separator` after the name, `name_prefix` before it)"
                .into());
        }
        if !self.name_again.is_empty() && (self.body != BodyKind::NameThenArguments || self.name_end.is_empty()) {
            return Err("`name_again` needs a name_then_arguments body and a `name_end`".into());
        }
        if self.prompt_opens_call && self.trigger_in_body() {
            return Err("`prompt_opens_call` needs a section_start or call_start for the prompt to end with".into());
        }
        if !self.text_start.is_empty() && self.trigger_in_body() {
            return Err("`text_start` needs a section_start or call_start to follow".into());
        }
        if self.nested_function && self.body != BodyKind::JsonNameArguments {
            return Err("`nested_function` belongs to a json_name_arguments body".into());
        }
        if self.spacing != Spacing::Optional && self.dialect != ArgsDialect::Json {
            return Err("`spacing` belongs to the json dialect".into());
        }
        if self.single_quotes && self.dialect != ArgsDialect::Python {
            return Err("`single_quotes` belongs to the python dialect".into());
        }
        let gemma_quirks = PythonQuirks { quoted_scalars: self.python_quirks.quoted_scalars, ..Default::default() };
        let quirks_fit = match self.dialect {
            ArgsDialect::Python => true,
            ArgsDialect::Gemma4 => self.python_quirks == gemma_quirks,
            _ => self.python_quirks == PythonQuirks::default(),
        };
        if !quirks_fit {
            return Err("`python_quirks` belong to the python dialect (`quoted_scalars` to gemma4 too)".into());
        }
        if !self.string_quote.is_empty() && self.dialect != ArgsDialect::Gemma4 {
            return Err("`string_quote` belongs to the gemma4 dialect".into());
        }
        if !self.name_prefix.is_empty() && self.body != BodyKind::NameThenArguments {
            return Err("`name_prefix` belongs to a name_then_arguments body".into());
        }
        if let Some(p) = &self.params {
            if self.dialect != ArgsDialect::XmlParameters {
                return Err("`params` belongs to the xml_parameters dialect".into());
            }
            if p.key_start.is_empty() || p.key_end.is_empty() || p.value_end_for("").is_empty() {
                return Err("`params` needs a key_start, a key_end and a value_end".into());
            }
        }
        let json_args = matches!(self.dialect, ArgsDialect::Json | ArgsDialect::PythonDict);
        if json_args != (self.body == BodyKind::JsonNameArguments) && self.dialect != ArgsDialect::Json {
            return Err(match json_args {
                true => "the python_dict dialect belongs to a json_name_arguments body",
                false => "a json_name_arguments body has JSON (or python_dict) arguments",
            }
            .into());
        }
        Ok(())
    }
}

/// All embedded formats.
///
/// Cost: parses the embedded files (a few kilobytes) on each call.
///
/// # Errors
/// [`Error::InvalidParameter`] if a format file is malformed or inconsistent (a
/// build-time mistake the tests catch).
pub fn all() -> Result<Vec<ToolFormat>> {
    FORMAT_FILES
        .iter()
        .map(|(name, text)| {
            let bad = |reason: String| Error::InvalidParameter {
                name: "grammars",
                reason: format!("grammars/{name}: {reason}"),
            };
            let f: ToolFormat = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
            f.validate().map_err(bad)?;
            Ok(f)
        })
        .collect()
}

/// The format of `family`, if toolgate has one.
///
/// ```
/// let f = toolgate::tools::format::for_family("hermes")?.unwrap();
/// assert_eq!(f.call_start, "<tool_call>");
/// assert!(toolgate::tools::format::for_family("no-such-family")?.is_none());
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// # Errors
/// As [`all`].
pub fn for_family(family: &str) -> Result<Option<ToolFormat>> {
    Ok(all()?.into_iter().find(|f| f.family == family))
}
