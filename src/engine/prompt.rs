//! Chat prompts: messages → rendered template → token ids, with user text kept from
//! ever becoming a control token.

use serde_json::Value;

use crate::template::caps::PRESERVE_REASONING;
use crate::template::{transform, ChatSetup, RenderRequest};
use crate::tokenizer::{EncodeOptions, Tokenizer};
use crate::{Error, Result};

const OPEN: char = '\u{F8F0}';
const CLOSE: char = '\u{F8F1}';

fn wrap_if_special(v: &mut Value, tok: &Tokenizer) {
    match v {
        Value::String(s) if tok.contains_special_text(s) || s.contains(OPEN) || s.contains(CLOSE) => {
            let clean: String = s.chars().filter(|&c| c != OPEN && c != CLOSE).collect();
            *s = format!("{OPEN}{clean}{CLOSE}");
        }
        Value::Array(a) => a.iter_mut().for_each(|x| wrap_if_special(x, tok)),
        Value::Object(m) => m.values_mut().for_each(|x| wrap_if_special(x, tok)),
        _ => {}
    }
}

/// What one turn renders: the conversation, and the template variables the request
/// sets (`enable_thinking`, `reasoning_effort`, a client's `chat_template_kwargs`).
/// A `Vec` of messages converts into one with no variables.
#[derive(Debug, Clone, Default)]
pub struct TurnPrompt {
    /// OpenAI-shaped messages. A final assistant message with text and no calls is a
    /// prefill: the turn continues it ([`encode_chat`]).
    pub messages: Vec<Value>,
    /// Extra template variables, set beside `messages` and `tools`.
    pub vars: serde_json::Map<String, Value>,
}

impl From<Vec<Value>> for TurnPrompt {
    fn from(messages: Vec<Value>) -> Self {
        Self { messages, vars: Default::default() }
    }
}

/// The text of a final assistant message the turn continues (an assistant prefill):
/// one with text content (a string or text parts) and no tool calls.
///
/// ```
/// use serde_json::json;
/// use toolgate::engine::prompt::prefill_text;
/// let user = json!({"role": "user", "content": "Name a colour"});
/// assert_eq!(prefill_text(&[user.clone(), json!({"role": "assistant", "content": "The colour is"})]), Some("The colour is".into()));
/// assert_eq!(prefill_text(&[user.clone()]), None);
/// assert_eq!(prefill_text(&[user, json!({"role": "assistant", "content": ""})]), None);
/// ```
pub fn prefill_text(messages: &[Value]) -> Option<String> {
    let last = messages.last().filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))?;
    if last.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty()) {
        return None;
    }
    let text = match last.get("content")? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// Render `messages` (and `tools`) with the model's chat setup and tokenize.
///
/// The conversation is first adapted to the template ([`transform::apply`], then
/// [`transform::shape_fields`]). Any
/// message string that spells a control token is marked before rendering and
/// tokenized as plain text afterwards, so `<|im_end|>` typed by a user stays text;
/// everything the template itself writes is tokenized with special tokens.
///
/// A conversation that ends with an assistant message of text ([`prefill_text`]) is
/// continued, as llama.cpp's server and Anthropic's API do: the messages before it are
/// rendered with the generation prompt and its text follows, tokenized as text, so the
/// model's output picks up where it stops.
///
/// # Errors
/// [`crate::Error::Template`] if the template raises; tokenizer errors.
pub fn encode_chat(
    setup: &ChatSetup,
    tok: &Tokenizer,
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    extra: serde_json::Map<String, Value>,
) -> Result<(String, Vec<u32>)> {
    encode_chat_within(setup, tok, messages, tools, extra, usize::MAX)
}

/// [`encode_chat`] for a window of `context` tokens: a rendered prompt that certainly
/// does not fit is refused before it is tokenized in full
/// ([`Tokenizer::certainly_exceeds`]), so the work and memory a request can cost stay
/// bounded by the context, not by its body.
///
/// # Errors
/// As [`encode_chat`]; [`Error::ContextOverflow`] (with the count reached so far,
/// "at least") for a prompt that certainly does not fit.
pub fn encode_chat_within(
    setup: &ChatSetup,
    tok: &Tokenizer,
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    extra: serde_json::Map<String, Value>,
    context: usize,
) -> Result<(String, Vec<u32>)> {
    let mut messages = messages;
    let prefill = prefill_text(&messages);
    if prefill.is_some() {
        messages.pop();
    }
    let caps = setup.report.caps;
    let mut extra = extra;
    if caps.supports_preserve_reasoning {
        // Earlier reasoning stays in the prompt, as llama.cpp's server renders such
        // templates by default; a request's own `chat_template_kwargs` win.
        for (name, keep) in PRESERVE_REASONING {
            extra.entry(name).or_insert(Value::Bool(keep));
        }
    }
    let object_arguments = caps.supports_object_arguments && !setup.layout.string_arguments;
    let messages = transform::apply(messages, setup.policy);
    let mut messages = transform::shape_fields(messages, object_arguments, caps.requires_typed_content());
    messages.iter_mut().for_each(|m| wrap_if_special(m, tok));
    let req = RenderRequest {
        messages,
        tools,
        add_generation_prompt: true,
        bos_token: tok.special_text(tok.bos()).to_string(),
        eos_token: tok.special_text(tok.eos()).to_string(),
        extra,
    };
    let rendered = setup.template.render(&req)?;
    if let Some(at_least) = tok.certainly_exceeds(&rendered, EncodeOptions::TEMPLATE, context)? {
        return Err(Error::ContextOverflow { prompt_tokens: at_least, context_length: context });
    }
    let mut ids = Vec::new();
    let mut plain = String::with_capacity(rendered.len());
    let mut rest = rendered.as_str();
    while let Some(o) = rest.find(OPEN) {
        ids.extend(tok.encode(&rest[..o], EncodeOptions::TEMPLATE)?);
        plain.push_str(&rest[..o]);
        let after = &rest[o + OPEN.len_utf8()..];
        let c = after.find(CLOSE).unwrap_or(after.len());
        ids.extend(tok.encode(&after[..c], EncodeOptions::TEXT)?);
        plain.push_str(&after[..c]);
        rest = after.get(c + CLOSE.len_utf8()..).unwrap_or("");
    }
    ids.extend(tok.encode(rest, EncodeOptions::TEMPLATE)?);
    plain.push_str(rest);
    if let Some(text) = prefill {
        ids.extend(tok.encode(&text, EncodeOptions::TEXT)?);
        plain.push_str(&text);
    }
    Ok((plain, ids))
}
