//! Chat requests: messages → rendered template → token ids, with user text kept
//! from ever becoming a control token.

use serde_json::Value;

use crate::template::{transform, ChatSetup, RenderRequest};
use crate::tokenizer::{EncodeOptions, Tokenizer};
use crate::Result;

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

/// Render `messages` (and `tools`) with the model's chat setup and tokenize.
///
/// The conversation is first adapted to the template ([`transform::shape_fields`],
/// [`transform::apply`]). Any
/// message string that spells a control token is marked before rendering and
/// tokenized as plain text afterwards, so `<|im_end|>` typed by a user stays text;
/// everything the template itself writes is tokenized with special tokens.
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
    let caps = setup.report.caps;
    let messages = transform::shape_fields(messages, caps.supports_object_arguments, caps.supports_typed_content);
    let mut messages = transform::apply(messages, setup.policy);
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
    Ok((plain, ids))
}
