//! Chat requests: messages → rendered template → token ids, with user text kept
//! from ever becoming a control token.

use serde_json::Value;

use std::sync::Arc;

use serde::Serialize;

use super::{Engine, FinishReason, GenerateParams, Generation, LazyConstraint};
use crate::grammar::{Grammar, TokenVocab};
use crate::template::{transform, ChatSetup, RenderRequest};
use crate::tokenizer::{EncodeOptions, Tokenizer};
use crate::tools::{self, format, Tool, ToolCall, ToolChoice};
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

/// Constrained (the default) or native tool calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Calls are forced to be valid for the declared schemas.
    #[default]
    Constrained,
    /// Free generation, then the family's parser: what the model does on its own.
    Native,
}

/// One assistant turn with tools.
#[derive(Debug, Clone, Serialize)]
pub struct ChatTurn {
    /// Text outside tool calls.
    pub content: String,
    /// Parsed calls.
    pub tool_calls: Vec<ToolCall>,
    /// `"tool_calls"`, `"stop"` or `"length"`.
    pub finish_reason: &'static str,
    /// Call blocks that did not parse (native mode only; always 0 when constrained).
    pub parse_failures: usize,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
}

/// Run one assistant turn: render, generate (constrained per `choice` in
/// [`ToolMode::Constrained`]), parse the calls.
///
/// # Errors
/// [`Error::InvalidParameter`] when the family has no format file, the named tool does
/// not exist, or tools are given for `tool_choice: none`; schema, template and model
/// errors.
#[allow(clippy::too_many_arguments)]
pub fn tool_turn(
    engine: &mut Engine,
    setup: &ChatSetup,
    messages: Vec<Value>,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    mode: ToolMode,
    params: &GenerateParams,
) -> Result<ChatTurn> {
    let fmt = format::for_family(setup.family)?.ok_or_else(|| Error::InvalidParameter {
        name: "tools",
        reason: format!(
            "no tool-call format for the `{}` family yet (formats: {}); use --tool-fallback generic",
            setup.family,
            format::all().map(|a| a.into_iter().map(|f| f.family).collect::<Vec<_>>().join(", ")).unwrap_or_default()
        ),
    })?;
    let tool_json: Option<Vec<Value>> = if tools.is_empty() || *choice == ToolChoice::None {
        None
    } else {
        Some(tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect())
    };
    let tok = engine.tokenizer().clone();
    let (_, ids) = encode_chat(setup, &tok, messages, tool_json, Default::default())?;
    let gen: Generation = match (mode, choice, tools.is_empty()) {
        (_, ToolChoice::None, _) | (_, _, true) | (ToolMode::Native, _, _) => engine.generate(&ids, params, |_| {})?,
        (ToolMode::Constrained, ToolChoice::Auto, false) => {
            let regex = tools::calls_regex(&fmt, tools, choice, parallel, &tok)?;
            let lazy = LazyConstraint {
                grammar: Arc::new(Grammar::from_regex(&regex)?),
                vocab: Arc::new(TokenVocab::from_tokenizer(&tok)),
                trigger: tools::marker_bytes(&fmt.call_start, &tok),
            };
            engine.generate_lazy(&ids, params, lazy, |_| {})?
        }
        (ToolMode::Constrained, _, false) => {
            let regex = tools::calls_regex(&fmt, tools, choice, parallel, &tok)?;
            let grammar = Arc::new(Grammar::from_regex(&regex)?);
            let mut m = grammar.matcher(Arc::new(TokenVocab::from_tokenizer(&tok)));
            engine.generate_constrained(&ids, params, &mut m, |_| {})?
        }
    };
    let eog = tok.eog_tokens();
    let body: Vec<u32> = gen.tokens.iter().copied().filter(|t| !eog.contains(t)).collect();
    let text = tok.decode(&body, false);
    let (content, calls, failures) =
        if *choice == ToolChoice::None { (text.trim().to_string(), vec![], 0) } else { tools::parse(&fmt, &text) };
    let finish_reason = if !calls.is_empty() {
        "tool_calls"
    } else if gen.finish_reason == FinishReason::Length {
        "length"
    } else {
        "stop"
    };
    Ok(ChatTurn {
        content,
        tool_calls: calls,
        finish_reason,
        parse_failures: failures,
        prompt_tokens: gen.prompt_tokens,
        completion_tokens: gen.completion_tokens,
    })
}
