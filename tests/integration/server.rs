//! The server on the real SmolLM2 (generic fallback), driven over HTTP on 127.0.0.1.

use crate::common;

use crate::common::server::{agent, start, Server};

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

fn post(s: &Server, body: &str) -> (u16, Value) {
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    (status, v)
}

/// POST with `stream: true`; returns the `data:` payloads in order.
fn post_stream(s: &Server, body: &Value) -> Vec<String> {
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("content-type").unwrap().to_str().unwrap().starts_with("text/event-stream"));
    let text = r.body_mut().read_to_string().unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(String::from).collect()
}

/// `(id, name, arguments)` of a streamed call.
type Call = (String, String, String);

/// Accumulate streamed chunks the way the OpenAI SDKs do: content, calls, finish
/// reason, usage.
fn accumulate(events: &[String]) -> (String, Vec<Call>, String, Option<Value>) {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let (mut content, mut calls, mut finish, mut usage) = (String::new(), Vec::<Call>::new(), String::new(), None);
    for (i, e) in events[..events.len() - 1].iter().enumerate() {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        if !v["usage"].is_null() {
            usage = Some(v["usage"].clone());
            continue;
        }
        let c = &v["choices"][0];
        if i == 0 {
            assert_eq!(c["delta"]["role"], "assistant");
        }
        if let Some(t) = c["delta"]["content"].as_str() {
            content.push_str(t);
        }
        for tc in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = tc["index"].as_u64().unwrap() as usize;
            if let Some(id) = tc["id"].as_str() {
                assert_eq!(index, calls.len(), "id and name come first, once per call");
                calls.push((id.into(), tc["function"]["name"].as_str().unwrap().into(), String::new()));
            }
            calls[index].2.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.into();
        }
    }
    (content, calls, finish, usage)
}

#[test]
fn streams_tool_calls_as_incremental_deltas_equal_to_the_non_streamed_answer() {
    let s = start(&["--tool-fallback", "generic"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"]}}}]);
    for choice in [json!("required"), json!({"type": "function", "function": {"name": "get_weather"}}), json!("auto")] {
        let mut body = json!({
            "messages": [{"role": "user", "content": "What's the weather in Paris for the next 3 days?"}],
            "tools": tools, "tool_choice": choice, "parallel_tool_calls": false, "max_tokens": 48, "temperature": 0,
        });
        let (status, whole) = post(&s, &body.to_string());
        assert_eq!(status, 200, "{whole}");
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let events = post_stream(&s, &body);
        let (content, calls, finish, usage) = accumulate(&events);
        // As OpenAI: a turn that must call opens with `content: null`, one that may
        // answer in text with `""`.
        let first: Value = serde_json::from_str(&events[0]).unwrap();
        let opened = &first["choices"][0]["delta"]["content"];
        assert_eq!(opened, &if choice == "auto" { json!("") } else { Value::Null }, "{choice}");
        let msg = &whole["choices"][0]["message"];
        assert_eq!(content, msg["content"].as_str().unwrap_or(""), "{choice}");
        assert_eq!(finish, whole["choices"][0]["finish_reason"].as_str().unwrap());
        let want: Vec<(String, String)> = msg["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (c["function"]["name"].as_str().unwrap().into(), c["function"]["arguments"].as_str().unwrap().into())
            })
            .collect();
        let got: Vec<(String, String)> = calls.iter().map(|(_, n, a)| (n.clone(), a.clone())).collect();
        assert_eq!(got, want, "{choice}");
        assert_eq!(usage.unwrap()["completion_tokens"], whole["usage"]["completion_tokens"]);
        // Both answers carry the turn's timings in llama.cpp's names (the stream on its
        // finishing chunk): the generated tokens, those jump-forward (on by default) fed
        // in chunks — a call's keys and separators.
        let finishing = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find(|v| v["choices"][0]["finish_reason"].is_string())
            .unwrap();
        for t in [&whole["timings"], &finishing["timings"]] {
            assert_eq!(t["predicted_n"], whole["usage"]["completion_tokens"], "{t}");
            assert!(
                t["prompt_n"].as_u64().is_some_and(|n| n > 0) && t["prompt_ms"].as_f64().is_some_and(|ms| ms > 0.0)
            );
            let forced = t["forced_n"].as_u64().unwrap();
            assert!(t["predicted_ms"].as_f64().is_some() && t["mask_ms"].as_f64().is_some(), "{t}");
            assert!(forced <= t["predicted_n"].as_u64().unwrap() && (choice == "auto" || forced > 0), "{t}");
        }
        let cached = whole["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        assert_eq!(
            whole["timings"]["prompt_n"].as_u64().unwrap() + cached,
            whole["usage"]["prompt_tokens"].as_u64().unwrap()
        );
        if choice != json!("auto") {
            assert_eq!(finish, "tool_calls");
            let args: Value = serde_json::from_str(&calls[0].2).unwrap();
            assert!(args["city"].is_string() && args["days"].is_i64(), "{args}");
            // Incremental: the arguments came in more than one chunk.
            let arg_chunks = events
                .iter()
                .filter_map(|e| serde_json::from_str::<Value>(e).ok())
                .filter(|v| v["choices"][0]["delta"]["tool_calls"][0]["id"].is_null())
                .filter(|v| v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].is_string())
                .count();
            assert!(arg_chunks > 1, "{events:?}");
        }
    }
    // Plain streamed text, and an error before the stream starts is a plain JSON error.
    let events = post_stream(
        &s,
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8, "temperature": 0, "stream": true}),
    );
    let (content, calls, finish, usage) = accumulate(&events);
    assert!(calls.is_empty() && usage.is_none());
    assert!(finish == "stop" || finish == "length");
    let (_, whole) = post(
        &s,
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8, "temperature": 0}).to_string(),
    );
    assert_eq!(content, whole["choices"][0]["message"]["content"].as_str().unwrap());
    // The forced calls above went through as drafts: /metrics counts the tokens, the
    // chunks and the draft tokens the model did not take.
    let (status, text) = crate::common::server::get_text(&s, "/metrics");
    assert_eq!(status, 200);
    let (tokens, chunks) =
        (metric(&text, "toolgate_jump_forward_tokens_total"), metric(&text, "toolgate_jump_forward_chunks_total"));
    assert!(chunks > 0.0 && tokens > chunks, "{text}");
    assert!(text.contains("toolgate_jump_forward_rejected_tokens_total"), "{text}");
    // A Responses answer carries them too.
    let (status, v) = crate::common::server::post_json(
        &s,
        "/v1/responses",
        &json!({"input": "Say hi", "max_output_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["timings"]["predicted_n"], v["usage"]["output_tokens"], "{v}");
    // And an Anthropic message, whole or streamed (on its `message_delta`).
    let body = json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8, "temperature": 0});
    let (status, v) = crate::common::server::post_json(&s, "/v1/messages", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["timings"]["predicted_n"], v["usage"]["output_tokens"], "{v}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = crate::common::server::post_text(&s, "/v1/messages", &streamed);
    assert_eq!(status, 200, "{text}");
    let delta =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).find(|d| d.contains("\"message_delta\"")).unwrap();
    let delta: Value = serde_json::from_str(delta).unwrap();
    assert_eq!(delta["timings"]["predicted_n"], delta["usage"]["output_tokens"], "{delta}");
    let (status, v) = post(&s, &json!({"messages": [{"role": "user", "content": "x"}], "stream": true, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer", "not": {"const": 3}}, "strict": true}}]}).to_string());
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("`not`"), "{v}");
}

#[test]
fn refuses_a_model_whose_template_cannot_do_tools() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("serve")
        .arg("--model")
        .arg(common::model(common::SMOLLM2))
        .args(["--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rejected: its chat template does not support tool calling"), "{err}");
}

#[test]
fn answers_tool_calls_and_errors_like_openai() {
    let s = start(&["--tool-fallback", "generic"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let body = json!({
        "model": "SmolLM2-135M-Instruct.Q4_1",
        "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
        "tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 40, "temperature": 0
    });
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string());
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    // Multi-turn: the tool result goes back through the template.
    let body = json!({
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "18 degrees and sunny"}
        ],
        "tools": tools, "tool_choice": "none", "max_tokens": 16, "temperature": 0
    });
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string());

    // response_format json_schema.
    let body = json!({"messages": [{"role": "user", "content": "A city as JSON"}], "max_tokens": 30, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "strict": true,
            "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"]}}}});
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    let content: Value = serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(content["name"].is_string());

    // Errors.
    let (status, v) = post(&s, "{not json");
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let (status, v) = post(&s, &json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}).to_string());
    assert_eq!(status, 404, "{v}");
    let (status, v) = post(&s, &json!({"messages": []}).to_string());
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("messages")));
    let bad_schema = json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
        "json_schema": {"strict": true, "schema": {"type": "integer", "not": {"const": 2}}}}});
    let (status, v) = post(&s, &bad_schema.to_string());
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("`not`"), "{v}");
    let (status, _) = post(&s, &json!({"messages": [{"role": "user", "content": "x"}], "temperature": -1}).to_string());
    assert_eq!(status, 400);
    let (status, v) = post(&s, &json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": tools}).to_string());
    assert_eq!(status, 400, "{v}");
    // A body over the limit: 413 as soon as the headers announce it.
    {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            5 << 20
        );
        c.write_all(head.as_bytes()).unwrap();
        let _ = c.write_all(&[b' '; 4096]);
        let mut resp = [0u8; 64];
        let n = c.read(&mut resp).expect("the server answers before the body is sent");
        assert!(
            String::from_utf8_lossy(&resp[..n]).starts_with("HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&resp[..n])
        );
    }
    let (_, props) = common::server::get_json(&s, "/props");
    assert_eq!(props["chat_format"], "generic");
    assert_eq!(props["caps"]["supports_tools"], true);
    assert_eq!(props["device"], "cpu");
    let (_, models) = common::server::get_json(&s, "/v1/models");
    assert_eq!(models["data"][0]["device"], "cpu", "{models}");
}

/// The value of an unlabelled or labelled sample in Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) || l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A long streamed turn, sent on a raw connection: parallel required calls on SmolLM2
/// go on until `max_tokens` (400). The caller holds the connection; dropping it is
/// the client leaving.
fn send_long_turn(s: &Server) -> std::net::TcpStream {
    use std::io::Write;
    let long = json!({"messages": [{"role": "user", "content": "Weather in Paris, Rome, Oslo, Lima and Kyiv?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": "required", "max_tokens": 400, "temperature": 0, "stream": true})
    .to_string();
    let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(c, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{long}", long.len()).unwrap();
    c
}

/// Read `c`'s stream until its first tool-call chunk: the turn is generating.
fn read_until_calls(c: &mut std::net::TcpStream) {
    use std::io::Read;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"tool_calls\"") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn queue_bound_429_cancel_on_disconnect_and_metrics() {
    let s = start(&["--tool-fallback", "generic", "--max-queue", "1"]);
    let mut c = send_long_turn(&s);
    read_until_calls(&mut c);
    // The one slot is taken: the next request is turned away with Retry-After.
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers().get("retry-after").unwrap(), "1");
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let mut r = agent()
        .post(format!("{}/v1/messages", s.base))
        .header("content-type", "application/json")
        .send(json!({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");

    // The client goes away: its generation stops and the slot frees.
    drop(c);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let (status, _) =
            post(&s, &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string());
        if status != 429 || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 200);

    let mut r = agent().get(format!("{}/metrics", s.base)).call().unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    assert!(text.contains(r#"toolgate_requests_total{endpoint="/v1/chat/completions",status="429"} "#), "{text}");
    assert!(text.contains(r#"toolgate_requests_total{endpoint="/v1/messages",status="429"} 1"#), "{text}");
    assert!(metric(&text, "toolgate_tool_calls_total") >= 1.0, "{text}");
    assert!(metric(&text, "toolgate_constraint_mask_seconds_total") > 0.0, "{text}");
    assert!(metric(&text, "toolgate_time_to_first_token_seconds_count") >= 2.0, "{text}");
    assert_eq!(metric(&text, "toolgate_queue_depth"), 0.0, "{text}");
    // The cancelled turn stopped long before its 400 tokens.
    let generated = metric(&text, "toolgate_completion_tokens_total");
    assert!(generated > 0.0 && generated < 200.0, "{generated} tokens generated: {text}");
}

#[test]
fn logprobs_like_openai_streamed_and_not() {
    let s = start(&["--tool-fallback", "generic"]);
    let body = json!({"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 16,
        "temperature": 0, "logprobs": true, "top_logprobs": 3});
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    let entries = c["logprobs"]["content"].as_array().unwrap().clone();
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    // One entry per generated token; the end-of-turn token that ended the turn has none.
    let ended_on_eog = c["finish_reason"] == "stop";
    assert_eq!(entries.len() + usize::from(ended_on_eog), completion, "{v}");
    let spelled: String = entries.iter().map(|e| e["token"].as_str().unwrap()).collect();
    assert_eq!(spelled, c["message"]["content"].as_str().unwrap());
    for e in &entries {
        let bytes: Vec<u8> = e["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(String::from_utf8(bytes).unwrap(), e["token"].as_str().unwrap());
        let lp = e["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely; the alternatives are sorted.
        assert_eq!(top[0]["token"], e["token"]);
        assert_eq!(top[0]["logprob"], e["logprob"]);
        assert!(top.windows(2).all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
    }

    // Streamed: the same entries, each on a chunk no earlier than its token's text.
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let events = post_stream(&s, &sbody);
    let (mut streamed, mut text_so_far, mut spelled_so_far) = (Vec::new(), String::new(), String::new());
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        let choice = &v["choices"][0];
        if let Some(a) = choice["logprobs"]["content"].as_array() {
            for x in a {
                spelled_so_far.push_str(x["token"].as_str().unwrap());
            }
            streamed.extend(a.iter().cloned());
        }
        text_so_far.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        assert!(text_so_far.starts_with(&spelled_so_far) || spelled_so_far.starts_with(&text_so_far));
    }
    assert_eq!(streamed.len(), entries.len());
    for (a, b) in streamed.iter().zip(&entries) {
        assert_eq!(a["token"], b["token"]);
        // The second request reuses the cached prompt prefix: rounding may differ.
        assert!((a["logprob"].as_f64().unwrap() - b["logprob"].as_f64().unwrap()).abs() < 1e-3, "{a} vs {b}");
    }

    // Not asked: null, streamed or not.
    let plain = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let (_, v) = post(&s, &plain.to_string());
    assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
    // Bad values: 400 naming the parameter.
    for (extra, param) in [
        (json!({"logprobs": "yes"}), "logprobs"),
        (json!({"logprobs": true, "top_logprobs": 21}), "top_logprobs"),
        (json!({"logprobs": true, "top_logprobs": -1}), "top_logprobs"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
    ] {
        let mut b = plain.clone();
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, v) = post(&s, &b.to_string());
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    // A tool schema the grammar cannot enforce: 400, `param` the keyword's pointer.
    let tool = json!({"type": "function", "function": {"name": "f", "strict": true,
        "parameters": {"type": "object", "properties": {"ids": {"type": "array", "uniqueItems": true}}}}});
    let mut b = plain.clone();
    b["tools"] = json!([tool]);
    let (status, v) = post(&s, &b.to_string());
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "tools[f].function.parameters/properties/ids/uniqueItems", "{v}");
}

#[test]
fn parallel_requests_are_batched_and_answer_as_they_would_alone() {
    let s = start(&["--tool-fallback", "generic", "--parallel", "3"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    // `cache_prompt: false`: every prompt prefilled whole, so what is compared is the
    // batched decode alone. (Which cached prefix a request finds depends on which slot
    // it gets when three arrive at once, and a suffix prefilled after a cached prefix
    // rounds differently from a whole prompt: issue 25.)
    let bodies = [
        json!({"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 24, "temperature": 0,
            "cache_prompt": false}),
        json!({"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": tools,
            "tool_choice": "required", "max_tokens": 40, "temperature": 0, "cache_prompt": false}),
        json!({"messages": [{"role": "user", "content": "Write a haiku about rain."}], "max_tokens": 32,
            "temperature": 0, "cache_prompt": false}),
    ];
    let answer = |v: &Value| (v["choices"][0]["message"].clone(), v["choices"][0]["finish_reason"].clone());
    let alone: Vec<_> = bodies
        .iter()
        .map(|b| {
            let (status, v) = post(&s, &b.to_string());
            assert_eq!(status, 200, "{v}");
            answer(&v)
        })
        .collect();
    let (status, props) = common::server::get_json(&s, "/props");
    assert_eq!((status, props["parallel"].as_u64()), (200, Some(3)), "{props}");
    // All three at once, twice over.
    for _ in 0..2 {
        let together: Vec<_> = std::thread::scope(|sc| {
            let hs: Vec<_> = bodies.iter().map(|b| sc.spawn(|| post(&s, &b.to_string()))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((status, v), want) in together.iter().zip(&alone) {
            assert_eq!(*status, 200, "{v}");
            let (msg, finish) = answer(v);
            // Same text and finish reason; call ids are random per request.
            assert_eq!(msg["content"], want.0["content"]);
            assert_eq!(finish, want.1);
            assert_eq!(msg["tool_calls"][0]["function"], want.0["tool_calls"][0]["function"]);
        }
    }
    let mut r = agent().get(format!("{}/metrics", s.base)).call().unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    let (steps, rows) = (metric(&text, "toolgate_decode_steps_total"), metric(&text, "toolgate_decode_rows_total"));
    assert!(steps > 0.0 && rows > steps, "decode steps were not batched: {steps} steps, {rows} rows");
    assert_eq!(metric(&text, "toolgate_queue_depth"), 0.0, "{text}");
}

#[test]
fn each_conversation_returns_to_the_slot_holding_its_history() {
    let s = start(&["--tool-fallback", "generic", "--parallel", "2"]);
    let system = |topic: &str| format!("You are an expert on {topic}. {}", "Answer briefly and precisely. ".repeat(12));
    let turn = |msgs: &Value| {
        let (status, v) = post(&s, &json!({"messages": msgs, "max_tokens": 6, "temperature": 0}).to_string());
        assert_eq!(status, 200, "{v}");
        let u = &v["usage"];
        let answer = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        (u["prompt_tokens"].as_u64().unwrap(), u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap(), answer)
    };
    let (mut a, mut b) = (
        json!([{"role": "system", "content": system("rivers")}, {"role": "user", "content": "Longest river?"}]),
        json!([{"role": "system", "content": system("mountains")}, {"role": "user", "content": "Highest peak?"}]),
    );
    // Two conversations, interleaved: A, B, A, B. With two slots, each keeps its own.
    let (a1, a1_cached, a1_answer) = turn(&a);
    let (b1, b1_cached, b1_answer) = turn(&b);
    assert!(a1_cached < a1 / 4 && b1_cached < b1 / 4, "first turns reuse at most the template's opening");
    for (conv, answer) in [(&mut a, a1_answer), (&mut b, b1_answer)] {
        let msgs = conv.as_array_mut().unwrap();
        msgs.push(json!({"role": "assistant", "content": answer}));
        msgs.push(json!({"role": "user", "content": "And the second?"}));
    }
    let (_, a2_cached, _) = turn(&a);
    let (_, b2_cached, _) = turn(&b);
    assert!(a2_cached >= a1, "A's second turn reused {a2_cached} tokens; its first prompt had {a1}");
    assert!(b2_cached >= b1, "B's second turn reused {b2_cached} tokens; its first prompt had {b1}");
}

#[test]
fn unknown_routes_and_methods_answer_json_errors_in_the_apis_shape() {
    let s = start(&["--tool-fallback", "generic"]);
    let call = |method: &str, path: &str| {
        let url = format!("{}{path}", s.base);
        let mut r = match method {
            "GET" => agent().get(&url).call().unwrap(),
            "DELETE" => agent().delete(&url).call().unwrap(),
            _ => agent().post(&url).header("content-type", "application/json").send("{}").unwrap(),
        };
        let status = r.status().as_u16();
        (status, serde_json::from_str::<Value>(&r.body_mut().read_to_string().unwrap()).unwrap())
    };
    // OpenAI's shape: an SDK shows the message, not just "Error code: 404".
    let (status, v) = call("POST", "/v1/embeddings");
    assert_eq!(status, 404);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("no route POST /v1/embeddings"), "{v}");
    // Every route is named.
    for route in ["/v1/messages/count_tokens", "/tokenize", "/detokenize", "/v1/responses", "/metrics"] {
        assert!(msg.contains(route), "{route} missing from {msg}");
    }
    let (status, v) = call("GET", "/v1/chat/completions");
    assert_eq!((status, v["error"]["type"].as_str()), (405, Some("invalid_request_error")), "{v}");
    let (status, v) = call("GET", "/v1/responses");
    assert_eq!(status, 405, "{v}");
    // Anthropic's shape under /v1/messages.
    let (status, v) = call("DELETE", "/v1/messages");
    assert_eq!(
        (status, v["type"].as_str(), v["error"]["type"].as_str()),
        (405, Some("error"), Some("invalid_request_error"))
    );
    let (status, v) = call("POST", "/v1/messages/batches");
    assert_eq!((status, v["error"]["type"].as_str()), (404, Some("not_found_error")), "{v}");
}

#[test]
fn tokenize_and_detokenize_like_llama_cpp() {
    let s = start(&["--tool-fallback", "generic"]);
    let call = |path: &str, body: Value| crate::common::server::post_json(&s, path, &body);
    let (status, v) = call("/tokenize", json!({"content": "Hello world <|im_end|>"}));
    assert_eq!(status, 200, "{v}");
    let ids = v["tokens"].as_array().unwrap().clone();
    assert!(ids.len() > 3, "{v}");
    // User text spells control tokens as text unless `parse_special` asks otherwise.
    let (_, special) = call("/tokenize", json!({"content": "Hello world <|im_end|>", "parse_special": true}));
    assert!(special["tokens"].as_array().unwrap().len() < ids.len(), "{special}");
    let (status, back) = call("/detokenize", json!({"tokens": ids}));
    assert_eq!((status, back["content"].as_str()), (200, Some("Hello world <|im_end|>")), "{back}");
    let (_, pieces) = call("/tokenize", json!({"content": "Hello world", "with_pieces": true}));
    let joined: String = pieces["tokens"].as_array().unwrap().iter().map(|p| p["piece"].as_str().unwrap()).collect();
    assert_eq!(joined, "Hello world", "{pieces}");
    let (status, v) = call("/detokenize", json!({"tokens": [1, 99_999_999]}));
    assert_eq!(status, 400, "{v}");
    let (status, _) = call("/tokenize", json!({"text": "x"}));
    assert_eq!(status, 400);
}

#[test]
fn chat_show_prompt_prints_the_prompt_with_tools() {
    let tools = std::env::temp_dir().join(format!("toolgate-show-prompt-{}.json", std::process::id()));
    std::fs::write(
        &tools,
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
        .to_string(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["chat", "--model"])
        .arg(common::model(common::SMOLLM2))
        .args(["--tool-fallback", "generic", "--show-prompt", "--tool-choice", "required", "--max-tokens", "48"])
        .arg("--tools")
        .arg(&tools)
        .args(["--message", "Weather in Oslo?"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&tools);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("--- prompt (") && stderr.contains("get_weather"), "{stderr}");
}

/// `/v1/completions` continues a raw prompt exactly as `toolgate run` does (the same
/// greedy text, control tokens in the prompt read as tokens), and refuses `suffix` on
/// a vocabulary without fill-in-the-middle tokens.
#[test]
fn completions_continue_the_prompt_as_run_does() {
    let prompt = "<|im_start|>user\nName three fruits.<|im_end|>\n<|im_start|>assistant\n";
    let run = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--special", "-n", "20", "--model"])
        .arg(common::model(common::SMOLLM2))
        .args(["--prompt", prompt])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = start(&["--tool-fallback", "generic"]);
    let call = |body: Value| crate::common::server::post_json(&s, "/v1/completions", &body);
    let (status, v) = call(json!({"prompt": prompt, "max_tokens": 20, "temperature": 0}));
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(!text.trim().is_empty(), "{v}");
    assert_eq!(text, String::from_utf8_lossy(&run.stdout).trim_end_matches('\n'), "{v}");
    let (status, v) = call(json!({"prompt": "def f(", "suffix": "):\n", "max_tokens": 4}));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("fill-in-the-middle"), "{v}");
    assert_eq!(v["error"]["param"], "suffix", "{v}");
    // A prompt far past the window is refused without being tokenized in full.
    let (status, v) = call(json!({"prompt": "word ".repeat(600_000), "max_tokens": 4}));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("context"), "{v}");
}

/// The load gauges a router reads to pick a replica — the Gateway API Inference
/// Extension's endpoint picker scrapes vLLM's names by default: with one engine, one
/// long turn generating and one queued behind it, `/metrics` says 1 running and 1
/// waiting, under toolgate's names and vLLM's, typed as gauges; both fall back to 0
/// once the clients leave.
#[test]
fn load_gauges_say_how_many_requests_wait_and_run() {
    let s = start(&["--tool-fallback", "generic", "--parallel", "1", "--max-queue", "4"]);
    let mut first = send_long_turn(&s);
    read_until_calls(&mut first);
    let second = send_long_turn(&s);
    let scrape = || agent().get(format!("{}/metrics", s.base)).call().unwrap().body_mut().read_to_string().unwrap();
    let until = |want: (f64, f64)| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let text = scrape();
            let got = (metric(&text, "vllm:num_requests_running"), metric(&text, "vllm:num_requests_waiting"));
            if got == want || std::time::Instant::now() > deadline {
                return (got, text);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (got, text) = until((1.0, 1.0));
    assert_eq!(got, (1.0, 1.0), "{text}");
    assert_eq!(metric(&text, "toolgate_requests_running"), 1.0, "{text}");
    assert_eq!(metric(&text, "toolgate_requests_waiting"), 1.0, "{text}");
    assert_eq!(metric(&text, "toolgate_queue_depth"), 2.0, "{text}");
    let kv_names = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "toolgate_kv_cache_usage_ratio"];
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "toolgate_requests_waiting"]
        .into_iter()
        .chain(kv_names)
    {
        assert!(text.contains(&format!("# TYPE {name} gauge")), "{name}: {text}");
    }
    // The running turn's prompt is in its slot's cache: a share above 0, at most 1,
    // the same under every name.
    let kv = metric(&text, "vllm:kv_cache_usage_perc");
    assert!(kv > 0.0 && kv <= 1.0, "{text}");
    assert!(kv_names.iter().all(|n| metric(&text, n) == kv), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    drop((first, second));
    let (got, text) = until((0.0, 0.0));
    assert_eq!(got, (0.0, 0.0), "{text}");
    // Finished turns stay cached for prefix reuse: the share does not drop to 0.
    let after = metric(&text, "vllm:kv_cache_usage_perc");
    assert!(after > 0.0 && after <= 1.0, "{text}");
}
