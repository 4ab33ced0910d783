//! `POST /v1/completions`: OpenAI's legacy text completion, as editors, eval harnesses
//! and `lm-eval` use it. The prompt (a string or token ids, one per request) is
//! continued as it is, without the chat template; with `suffix` the model fills in the
//! middle (FIM tokens, [`crate::engine::completion`]). `stream: true` answers with
//! `text_completion` chunks and `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{stream, StreamExt};
use serde_json::{json, Map, Value};

use super::openai::{check_model, include_usage, sampling, stream_end, stream_error};
use super::{now, read_body, validate, ApiError, AppState, Msg, Running};
use crate::engine::chat::ChatTurn;
use crate::engine::completion::{prepare_completion, CompletionPrompt};
use crate::engine::GenerateParams;
use crate::tools::stream::StreamEvent;

/// The most `logprobs` alternatives the legacy API allows.
const MAX_LOGPROBS: i64 = 5;

/// A validated `/v1/completions` request.
struct CompletionRequest {
    prompt: CompletionPrompt,
    suffix: Option<String>,
    params: GenerateParams,
    stream: bool,
    include_usage: bool,
    echo: bool,
    /// `logprobs: N`: each token's log-probability and its `N` best alternatives.
    logprobs: bool,
}

/// `prompt`: a string, token ids, or a list holding one of those (a batch of one).
fn prompt_of(v: Option<&Value>) -> Result<CompletionPrompt, ApiError> {
    let bad = |why: &str| ApiError::bad(format!("`prompt` {why}"), Some("prompt"));
    let tokens = |a: &[Value]| -> Option<Vec<u32>> { a.iter().map(|t| t.as_u64()?.try_into().ok()).collect() };
    match v {
        Some(Value::String(s)) => Ok(CompletionPrompt::Text(s.clone())),
        Some(Value::Array(a)) if a.len() == 1 && (a[0].is_string() || a[0].is_array()) => prompt_of(a.first()),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) && !a.is_empty() => {
            tokens(a).map(CompletionPrompt::Tokens).ok_or_else(|| bad("token ids must be non-negative integers"))
        }
        Some(Value::Array(a)) if a.len() > 1 && a.iter().all(|p| p.is_string() || p.is_array()) => {
            Err(bad("holds several prompts: send one prompt per request"))
        }
        None | Some(Value::Null) => Err(bad("is required")),
        Some(_) => Err(bad("must be a string, an array of token ids, or an array holding one of them")),
    }
}

impl CompletionRequest {
    fn parse(s: &AppState, obj: &Map<String, Value>) -> Result<Self, ApiError> {
        check_model(obj, s)?;
        for (name, what) in [("n", "several choices"), ("best_of", "best_of")] {
            if validate::opt_int(obj, name, 1, 1).is_err() {
                return Err(ApiError::bad(format!("{what} (`{name}` above 1) is not supported"), Some(name)));
            }
        }
        if obj.get("logit_bias").and_then(Value::as_object).is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::bad("`logit_bias` is not supported", Some("logit_bias")));
        }
        let prompt = prompt_of(obj.get("prompt"))?;
        let suffix = validate::opt_str(obj, "suffix")?.map(String::from);
        let top = validate::opt_int(obj, "logprobs", 0, MAX_LOGPROBS)?;
        let echo = validate::opt_bool(obj, "echo")?.unwrap_or(false);
        if echo && top.is_some() {
            return Err(ApiError::bad(
                "`echo` with `logprobs` would need the prompt's log-probabilities, which are not computed",
                Some("echo"),
            ));
        }
        let max_tokens = validate::opt_int(obj, "max_tokens", 1, i64::MAX)?.unwrap_or(16);
        let params = GenerateParams {
            max_tokens: usize::try_from(max_tokens).unwrap_or(usize::MAX),
            sampling: sampling(obj)?,
            stop: validate::stop_strings(obj, "stop", true)?,
            logprobs: top.map(|k| k as usize),
            ..GenerateParams::default()
        };
        Ok(Self {
            prompt,
            suffix,
            params,
            stream: validate::opt_bool(obj, "stream")?.unwrap_or(false),
            include_usage: include_usage(obj)?,
            echo,
            logprobs: top.is_some(),
        })
    }
}

/// Chat-shaped `logprobs.content` entries in the legacy shape: `tokens`,
/// `token_logprobs`, `top_logprobs` (one `{token: logprob}` map per token) and
/// `text_offset` (each token's character offset in prompt + completion, from `start`).
fn legacy_logprobs(entries: &[Value], start: usize) -> Value {
    let mut offset = start;
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for e in entries {
        let token = e["token"].as_str().unwrap_or_default();
        tokens.push(json!(token));
        lps.push(e["logprob"].clone());
        let top: Map<String, Value> = e["top_logprobs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| (t["token"].as_str().unwrap_or_default().to_string(), t["logprob"].clone()))
            .collect();
        tops.push(Value::Object(top));
        offsets.push(json!(offset));
        offset += token_chars(e);
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// The characters of one entry's token text.
fn token_chars(entry: &Value) -> usize {
    entry["token"].as_str().map_or(0, |t| t.chars().count())
}

fn usage_json(turn: &ChatTurn) -> Value {
    json!({"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens})
}

/// `finish_reason` in the legacy API's words (a stop string or end of text is `stop`).
fn finish_reason(turn: &ChatTurn) -> &'static str {
    if turn.finish_reason == "length" {
        "length"
    } else {
        "stop"
    }
}

/// The handler.
pub(crate) async fn completions(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&s, req).await?;
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
    let obj = v.as_object().ok_or_else(|| ApiError::bad("the body must be a JSON object", None))?;
    let mut r = CompletionRequest::parse(&s, obj)?;
    // The prompt's text: echoed back, and where `text_offset` starts.
    let prompt_text = match &r.prompt {
        CompletionPrompt::Text(t) => t.clone(),
        CompletionPrompt::Tokens(ids) => s.tokenizer.decode(ids, false),
    };
    let (stream, include_usage, asked) = (r.stream, r.include_usage, r.logprobs);
    let echo = r.echo.then(|| prompt_text.clone());
    let offset = prompt_text.chars().count();
    let params = std::mem::take(&mut r.params);
    let (prompt, suffix) = (r.prompt, r.suffix);
    let prepare = move |e: &mut crate::engine::Engine, _: &AppState| prepare_completion(e, &prompt, suffix.as_deref());
    let running = Running::start(&s, prepare, params, stream).await?;
    let id = format!("cmpl-{:016x}", rand::random::<u64>());
    let (created, model) = (now(), s.model_id.clone());
    let logprobs = move |entries: &[Value], start: usize| asked.then(|| legacy_logprobs(entries, start));
    if !stream {
        let (turn, entries) = running.finish_with_logprobs().await?;
        let text = format!("{}{}", echo.unwrap_or_default(), turn.content);
        return Ok(Json(json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish_reason(&turn),
                "logprobs": logprobs(&entries, offset)}],
            "usage": usage_json(&turn),
        }))
        .into_response());
    }
    let head = json!({"id": id, "object": "text_completion", "created": created, "model": model});
    let chunk = move |head: &Value, text: &str, finish: Option<&str>, lp: Option<Value>| {
        let mut v = head.clone();
        v["choices"] = json!([{"index": 0, "text": text, "finish_reason": finish, "logprobs": lp}]);
        Event::default().data(v.to_string())
    };
    let first = echo.filter(|e| !e.is_empty()).map(|e| chunk(&head, &e, None, None));
    // Log-probabilities wait for the chunk carrying their token's text.
    let events = stream::unfold(Some((running, head, Vec::new(), offset)), move |st| async move {
        let (mut running, head, mut pending, mut at) = st?;
        let (batch, go_on) = match running.next().await {
            Some(Msg::Logprob(v)) => {
                pending.push(v);
                (vec![], true)
            }
            Some(Msg::Event(StreamEvent::Content(t))) => {
                let lp = logprobs(&pending, at);
                at += pending.drain(..).map(|e| token_chars(&e)).sum::<usize>();
                (vec![chunk(&head, &t, None, lp)], true)
            }
            Some(Msg::Done(turn)) => {
                let lp = (!pending.is_empty()).then(|| logprobs(&pending, at)).flatten();
                let last = chunk(&head, "", Some(finish_reason(&turn)), lp);
                (stream_end(&head, last, include_usage.then(|| usage_json(&turn))), false)
            }
            Some(Msg::Failed(e)) => (stream_error(&e), false),
            // A completion has no calls or reasoning: nothing else is sent.
            Some(Msg::Started(_) | Msg::Event(_)) => (vec![], true),
            None => (vec![], false),
        };
        let next = go_on.then_some((running, head, pending, at));
        Some((stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)), next))
    })
    .flatten();
    Ok(Sse::new(stream::iter(first.map(Ok)).chain(events)).into_response())
}
