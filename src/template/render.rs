//! Rendering a chat template for a conversation.

use minijinja::{Environment, Value};
use serde::{Deserialize, Serialize};

use super::bounds::MAX_OUTPUT_BYTES;
use super::env::{environment, Clock};
use crate::{Error, Result};

/// What a chat template is rendered with: the variables `transformers`'
/// `apply_chat_template` passes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RenderRequest {
    /// OpenAI-style messages (`role`, `content` as string or parts, `tool_calls`,
    /// `tool_call_id`, `reasoning_content` …), passed to the template as they are.
    pub messages: Vec<serde_json::Value>,
    /// Tool definitions (`{"type":"function","function":{…}}`); `None` leaves the
    /// `tools` variable undefined.
    pub tools: Option<Vec<serde_json::Value>>,
    /// Append the assistant-turn opener.
    pub add_generation_prompt: bool,
    /// The text of BOS.
    pub bos_token: String,
    /// The text of EOS.
    pub eos_token: String,
    /// Extra template variables (`enable_thinking`, `documents`, …).
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RenderRequest {
    /// A request for `messages` with a generation prompt and no tools.
    pub fn new(messages: Vec<serde_json::Value>) -> Self {
        Self {
            messages,
            tools: None,
            add_generation_prompt: true,
            bos_token: String::new(),
            eos_token: String::new(),
            extra: Default::default(),
        }
    }
}

/// A chat template: Jinja source plus the environment that renders it.
///
/// ```
/// use toolgate::template::{ChatTemplate, RenderRequest};
/// let t = ChatTemplate::new("demo", "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}")?;
/// let req = RenderRequest::new(vec![serde_json::json!({"role": "user", "content": " hi "})]);
/// assert_eq!(t.render(&req)?, "<user>hi\n");
/// # Ok::<(), toolgate::Error>(())
/// ```
pub struct ChatTemplate {
    name: String,
    source: String,
    /// Holds `source` with what it builds checked ([`super::bounds::rewrite`]),
    /// compiled, as [`CHECKED`].
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("name", &self.name).field("bytes", &self.source.len()).finish()
    }
}

impl Clone for ChatTemplate {
    fn clone(&self) -> Self {
        Self { name: self.name.clone(), source: self.source.clone(), env: self.env.clone() }
    }
}

/// Remove transformers' `{% generation %}` / `{% endgeneration %}` markers (an
/// extension that only tracks assistant spans; it renders its body unchanged).
fn strip_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        // The closer is searched after the opener: in `{%}` they overlap.
        let Some(end) = rest[start + 2..].find("%}").map(|e| e + 2) else { break };
        let tag = &rest[start + 2..start + end];
        let word = tag.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        if word == "generation" || word == "endgeneration" {
            // Keep whitespace control semantics simple: the tag renders nothing.
        } else {
            out.push_str(&rest[start..start + end + 2]);
        }
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

/// Python templates mutate lists with `{% set _ = xs.append(v) %}` (or `{% do … %}`);
/// minijinja values are immutable, so such a tag becomes `{% set xs = xs + [v] %}`,
/// which gives the same result for the namespace attributes and loop-local lists
/// templates use this on.
fn rewrite_appends(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start + 2..].find("%}").map(|l| l + 2) else { break };
        let tag = &rest[start..start + len + 2];
        out.push_str(&rest[..start]);
        out.push_str(&rewrite_append_tag(tag).unwrap_or_else(|| tag.to_string()));
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn rewrite_append_tag(tag: &str) -> Option<String> {
    let open_len = 2 + tag[2..].chars().take_while(|c| *c == '-' || *c == '+').count();
    let close_len = 2 + tag[..tag.len() - 2].chars().rev().take_while(|c| *c == '-' || *c == '+').count();
    let body = tag[open_len..tag.len() - close_len].trim();
    let call = if let Some(rest) = body.strip_prefix("do ") {
        rest.trim()
    } else {
        let rest = body.strip_prefix("set ")?.trim_start();
        let (_, rhs) = rest.split_once('=')?;
        rhs.trim()
    };
    let (target, arg) = call.split_once(".append(")?;
    let arg = arg.strip_suffix(')')?;
    let target = target.trim();
    if target.is_empty() || !target.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.') {
        return None;
    }
    Some(format!("{}set {target} = {target} + [{arg}] {}", &tag[..open_len], &tag[tag.len() - close_len..]))
}

/// Rewrite `{% for … in EXPR … %}` to `{% for … in (EXPR)|__pyiter … %}` so a loop over
/// `None` raises as it does in Python.
fn guard_for_loops(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 64);
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start + 2..].find("%}").map(|l| l + 2) else { break };
        let tag = &rest[start..start + len + 2];
        out.push_str(&rest[..start]);
        out.push_str(&rewrite_for_tag(tag).unwrap_or_else(|| tag.to_string()));
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn rewrite_for_tag(tag: &str) -> Option<String> {
    let inner_start = 2 + tag[2..].chars().take_while(|c| *c == '-' || *c == '+').count();
    let body = &tag[inner_start..tag.len() - 2];
    let trimmed = body.trim_start();
    let lead = body.len() - trimmed.len();
    let after_for = trimmed.strip_prefix("for")?;
    if !after_for.starts_with(char::is_whitespace) {
        return None;
    }
    // Find the top-level ` in ` that ends the loop targets.
    let in_pos = find_top_level(after_for, " in ")?;
    let expr_start = in_pos + 4;
    let expr_region = &after_for[expr_start..];
    let end = [" if ", " recursive"]
        .iter()
        .filter_map(|kw| find_top_level(expr_region, kw))
        .min()
        .unwrap_or_else(|| expr_region.trim_end_matches(['-', '+', ' ', '\n', '\t']).len());
    let expr = &expr_region[..end];
    if expr.trim().is_empty() {
        return None;
    }
    let prefix = &tag[..inner_start + lead + 3 + expr_start];
    let suffix = &tag[inner_start + lead + 3 + expr_start + end..];
    Some(format!("{prefix}({expr})|__pyiter{suffix}"))
}

/// Byte offset of `needle` in `s` outside strings and brackets.
fn find_top_level(s: &str, needle: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let (mut depth, mut quote) = (0i32, None::<u8>);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                _ if depth == 0 && s[i..].starts_with(needle) => return Some(i),
                _ => {}
            },
        }
        i += 1;
    }
    None
}

/// The name the checked source is compiled under in a template's environment.
const CHECKED: &str = "<template>";

impl ChatTemplate {
    /// Parse a template and compile it with its `~`, `+` and `*` checked
    /// ([`super::bounds`]). `name` appears in errors.
    ///
    /// # Errors
    /// [`Error::Template`] if the source does not parse, or nests expressions deeper
    /// than [`MAX_EXPR_DEPTH`](super::bounds::MAX_EXPR_DEPTH).
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Result<Self> {
        Self::with_clock(name, source, Clock::System)
    }

    /// Parse a template whose `strftime_now` reads `clock`.
    ///
    /// # Errors
    /// [`Error::Template`] if the source does not parse.
    pub fn with_clock(name: impl Into<String>, source: impl Into<String>, clock: Clock) -> Result<Self> {
        let name = name.into();
        let source = rewrite_appends(&guard_for_loops(&strip_generation_tags(&source.into())));
        let mut env = environment(clock);
        // Compiled once, here: a render only evaluates it. (Never the unchecked source:
        // compiling folds constants, and `'x' * 100000000` is a constant.)
        let checked = super::bounds::rewrite(&source, super::env::syntax())
            .map_err(|reason| Error::Template { template: name.clone(), reason })?;
        env.add_global("__literals", Value::from(checked.literals));
        env.add_template_owned(CHECKED, checked.source)
            .map_err(|e| Error::Template { template: name.clone(), reason: describe(&e) })?;
        Ok(Self { name, source, env })
    }

    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Jinja source (after removing `{% generation %}` markers).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Render for `req`.
    ///
    /// Cost: one bounded evaluation (the template is compiled once, by [`ChatTemplate::new`]),
    /// typically 0.1-0.2 ms.
    ///
    /// # Errors
    /// [`Error::Template`] when the template raises (`raise_exception`), runs out of
    /// fuel, recurses too deeply, writes more than
    /// [`MAX_OUTPUT_BYTES`], builds a value or
    /// a total past [`super::bounds`]' limits, or hits a type error.
    pub fn render(&self, req: &RenderRequest) -> Result<String> {
        let mut ctx = serde_json::Map::new();
        for (k, v) in &req.extra {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), serde_json::Value::Array(req.messages.clone()));
        // No tools: `tools` stays undefined (or whatever `extra` sets), so templates that
        // loop over it without a guard still render.
        if let Some(tools) = &req.tools {
            ctx.insert("tools".into(), serde_json::Value::Array(tools.clone()));
        }
        ctx.insert("add_generation_prompt".into(), req.add_generation_prompt.into());
        ctx.insert("bos_token".into(), req.bos_token.clone().into());
        ctx.insert("eos_token".into(), req.eos_token.clone().into());
        self.render_value(Value::from(minijinja::value::Serde(&ctx)))
    }

    /// Render with an arbitrary context value (a map of template variables).
    ///
    /// # Errors
    /// As [`ChatTemplate::render`].
    pub fn render_value(&self, ctx: Value) -> Result<String> {
        let tmpl = self
            .env
            .get_template(CHECKED)
            .map_err(|e| Error::Template { template: self.name.clone(), reason: describe(&e) })?;
        let mut out = BoundedOutput { bytes: Vec::new(), overflowed: false };
        super::bounds::begin_render();
        match tmpl.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.bytes)
                .map_err(|_| Error::Template { template: self.name.clone(), reason: "the output is not UTF-8".into() }),
            Err(_) if out.overflowed => Err(Error::Template {
                template: self.name.clone(),
                reason: format!("the output passed {} MiB", MAX_OUTPUT_BYTES >> 20),
            }),
            Err(e) => Err(Error::Template { template: self.name.clone(), reason: describe(&e) }),
        }
    }
}

/// A render's output, refused past [`crate::template::bounds::MAX_OUTPUT_BYTES`].
struct BoundedOutput {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_OUTPUT_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("template output too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
