//! Hostile and careless clients, templates, GGUF files and flags (issue 29): each gets
//! a bounded, clear answer and the server keeps serving everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::server::{agent, start, Server};

fn addr(s: &Server) -> &str {
    s.base.trim_start_matches("http://")
}

/// Read until the peer closes (or 20 s pass): what it sent and when it closed.
fn read_to_close(c: &mut TcpStream, since: Instant) -> (String, Duration) {
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), since.elapsed())
}

fn health(s: &Server) -> u16 {
    agent().get(format!("{}/health", s.base)).call().map(|r| r.status().as_u16()).unwrap_or(0)
}

#[test]
fn stalled_clients_time_out_and_never_hold_up_shutdown() {
    let mut s = start(&["--tool-fallback", "generic", "--header-timeout", "1", "--body-timeout", "2"]);
    let t = Instant::now();
    // Connections that send nothing, half a head, or half a body.
    let mut silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr(&s)).unwrap()).collect();
    let mut head = TcpStream::connect(addr(&s)).unwrap();
    head.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: applic").unwrap();
    let mut body = TcpStream::connect(addr(&s)).unwrap();
    body.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 90\r\n\r\n{\"messages\"")
        .unwrap();
    // The others are still served meanwhile.
    assert_eq!(health(&s), 200);

    let (said, after) = read_to_close(&mut head, t);
    // Bounds are loose: the machine may be busy with other tests' models.
    assert!(after < Duration::from_secs(15), "a half-sent head held its connection {after:?}");
    assert!(!said.contains("200 OK"), "{said}");
    let (said, after) = read_to_close(&mut body, t);
    assert!(after >= Duration::from_secs(2) && after < Duration::from_secs(15), "body timeout after {after:?}");
    assert!(said.starts_with("HTTP/1.1 408"), "a stalled body gets 408: {said}");
    assert!(said.contains("did not arrive within 2 s"), "{said}");
    for c in &mut silent {
        let (said, after) = read_to_close(c, t);
        assert!(said.is_empty() && after < Duration::from_secs(15), "{said:?} after {after:?}");
    }

    // SIGTERM with a generation in progress, an idle connection and a half-sent head:
    // the generation finishes and is answered, the others do not hold the exit up.
    let _idle = TcpStream::connect(addr(&s)).unwrap();
    let mut stalled = TcpStream::connect(addr(&s)).unwrap();
    stalled.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n").unwrap();
    let req = json!({"messages": [{"role": "user", "content": "Write a long story about a dragon who learns to fly."}],
        "max_tokens": 48, "temperature": 0})
    .to_string();
    let mut gen = TcpStream::connect(addr(&s)).unwrap();
    write!(gen, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{req}", req.len()).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the turn has started
    let took = s.terminate(Duration::from_secs(30)).expect("the server did not exit within 30 s of SIGTERM");
    let (said, _) = read_to_close(&mut gen, Instant::now());
    assert!(said.starts_with("HTTP/1.1 200"), "the request in progress was not answered: {said}");
    let body: Value = serde_json::from_str(said.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    // Well under the 1 s header timeout plus the turn: the stalled head was not waited on.
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// `--drain-seconds`: after SIGTERM, `/ready` answers 503 while `/health` stays 200
/// and requests are still served (a router that polls readiness stops sending in that
/// time); once it is up, the server stops accepting and exits.
#[test]
fn sigterm_drains_first_ready_says_so_and_requests_are_still_served() {
    let mut s = start(&["--tool-fallback", "generic", "--drain-seconds", "5"]);
    let get = |s: &Server, path: &str| {
        let mut r = agent().get(format!("{}{path}", s.base)).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    };
    assert_eq!(get(&s, "/ready"), (200, r#"{"status":"ready"}"#.to_string()));
    let t = Instant::now();
    s.send_term();
    let deadline = t + Duration::from_secs(4);
    while get(&s, "/ready").0 == 200 {
        assert!(Instant::now() < deadline, "/ready still 200 after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(&s, "/ready"), (503, r#"{"status":"draining"}"#.to_string()));
    assert_eq!(health(&s), 200, "liveness stays up while draining");
    let req = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0});
    let mut r = agent().post(format!("{}/v1/chat/completions", s.base)).send_json(&req).unwrap();
    let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(r.status().as_u16(), 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(5), "the request was not served inside the drain: {:?}", t.elapsed());
    let exited = s.wait_exit(Duration::from_secs(30)).map(|_| t.elapsed());
    let exited = exited.expect("the server did not exit within 30 s of the drain's end");
    assert!(exited >= Duration::from_secs(5), "exited {exited:?} after SIGTERM, before the 5 s drain");
}

#[test]
fn connections_past_the_cap_are_closed_at_accept_and_counted() {
    // Default timeouts: the held connections stay however slow this machine is.
    let s = start(&["--tool-fallback", "generic", "--max-connections", "8"]);
    // Each held connection is proven served (a keep-alive /health answered on it), so
    // all 8 slots are ours: the start-up probe's connection may still hold a slot for a
    // moment after it closes, and a held connection refused in that moment is replaced.
    let mut held: Vec<TcpStream> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while held.len() < 8 {
        assert!(Instant::now() < deadline, "could not hold 8 connections");
        let mut c = TcpStream::connect(addr(&s)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"{\"status\":\"ok\"}") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if got.ends_with(b"{\"status\":\"ok\"}") {
            held.push(c);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut extra = TcpStream::connect(addr(&s)).unwrap();
    let _ = extra.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    let (said, _) = read_to_close(&mut extra, Instant::now());
    // Once they go, the server serves again.
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let mut r = agent().get(format!("{}/metrics", s.base)).call().unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    assert!(said.is_empty(), "a connection past the cap was served: {said}\nmetrics after:\n{text}");
    let refused = text.lines().find(|l| l.starts_with("toolgate_connections_refused_total ")).unwrap_or_default();
    assert!(!refused.ends_with(" 0") && !refused.is_empty(), "{text}");
}

#[test]
fn flags_out_of_range_are_refused_before_loading() {
    for (flag, value) in [
        ("--parallel", "100000"),
        ("--parallel", "0"),
        ("--header-timeout", "-1"),
        ("--max-connections", "0"),
        ("--drain-seconds", "-1"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--model", "/nonexistent.gguf", &format!("{flag}={value}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{flag} {value}: {err}");
    }
}

/// Output to a reader that stops early (`toolgate tools parse … | head -c 1`): the
/// CLI ends quietly, as Unix tools do, not with a panic on the closed pipe.
#[test]
fn output_to_a_closed_pipe_ends_the_cli_quietly() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let (tools, template) = (dir.path().join("tools.json"), dir.path().join("t.jinja"));
    let tool = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    std::fs::write(&tools, tool.to_string()).unwrap();
    std::fs::write(&template, crate::common::fixture_text("templates/printed-mapping.jinja")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["tools", "parse", "--chat-template"])
        .arg(&template)
        .arg("--tools")
        .arg(&tools)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before anything is written
    child.stdin.take().unwrap().write_all(br#"[calls]{"name": "f", "arguments": {}}[/calls]"#).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(13), "ended by SIGPIPE's default action: {:?}", out.status);
    }
}

#[test]
fn a_huge_prompt_is_refused_for_the_context_without_being_tokenized_in_full() {
    // One tool with a 370k-value enum: a 4 MB body that renders to ~3 M tokens. It used
    // to be tokenized in full (+1.1 GB) before the context check refused it.
    let s = start(&["--tool-fallback", "generic"]);
    let values: Vec<String> = (0..370_000).map(|i| format!("v{i}")).collect();
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "tools": [{"type": "function", "function": {"name": "pick",
            "parameters": {"type": "object", "properties": {"x": {"type": "string", "enum": values}}}}}]})
    .to_string();
    assert!(body.len() > 3_500_000 && body.len() < 4 << 20);
    let before = s.memory_mib("VmRSS");
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(body.as_str())
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("context overflow") && msg.contains("context window is 8192"), "{msg}");
    // Counted only until certain: a little past the window, not the ~3 M tokens.
    let counted: usize = msg.split("at least ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((8192..40_000).contains(&counted), "{msg}");
    let grew = s.memory_mib("VmHWM").saturating_sub(before);
    assert!(grew < 400, "the peak grew {grew} MiB for one refused request");
    // A prompt that fits is still served.
    assert_eq!(health(&s), 200);
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.body_mut().read_to_string().unwrap());
}

#[test]
fn the_early_context_refusal_never_refuses_a_prompt_that_fits() {
    use toolgate::gguf::GgufFile;
    use toolgate::tokenizer::{EncodeOptions, Tokenizer};
    for file in [crate::common::SMOLLM2, crate::common::GEMMA3] {
        let tok = Tokenizer::from_gguf(&GgufFile::open(crate::common::model(file)).unwrap()).unwrap();
        // Long text with chat-template special tokens in it, cut into many chunks.
        let turn = "<|im_start|>user\nWhat is the weather in Oslo, Kyiv and Lima? {\"city\": \"Oslo\"}<|im_end|>\n";
        let words = "antidisestablishmentarianism  floccinaucinihilipilification\t\n";
        let text = format!("{}{}", turn.repeat(900), words.repeat(900));
        let exact = tok.encode(&text, EncodeOptions::TEMPLATE).unwrap().len();
        assert!(text.len() > 16 << 10 && exact < text.len(), "{file}: {exact} tokens");
        for limit in [exact, exact + 1, exact * 2] {
            assert_eq!(tok.certainly_exceeds(&text, EncodeOptions::TEMPLATE, limit).unwrap(), None, "{file}");
        }
        let over = tok.certainly_exceeds(&text, EncodeOptions::TEMPLATE, exact / 3).unwrap();
        assert!(over.is_some_and(|n| n > exact / 3 && n <= exact + 64), "{file}: {over:?} of {exact}");

        // Any script: chunk ends and the whitespace cuts fall inside multibyte characters
        // (3-byte CJK, the 3-byte ideographic space, 4-byte emoji). It used to panic.
        for unit in ["東京の天気は？\u{3000}雨です。🌧", "🌧🌧🌧\u{3000}", "é"] {
            let text = unit.repeat(40_000 / unit.len());
            let exact = tok.encode(&text, EncodeOptions::TEMPLATE).unwrap().len();
            assert!(text.len() > 32 << 10, "{file}");
            for limit in [exact, exact * 2] {
                assert_eq!(tok.certainly_exceeds(&text, EncodeOptions::TEMPLATE, limit).unwrap(), None, "{file}");
            }
            let over = tok.certainly_exceeds(&text, EncodeOptions::TEMPLATE, exact / 3).unwrap();
            assert!(over.is_some_and(|n| n > exact / 3), "{file} {unit:?}: {over:?} of {exact}");
        }
    }
}

/// POST `body` to `path`: the status and the error message.
fn refusal(s: &Server, path: &str, body: &Value) -> (u16, String) {
    let (status, v) = crate::common::server::post_json(s, path, body);
    (status, v["error"]["message"].as_str().unwrap_or_default().to_string())
}

/// Post a chat completion that must end in a call; the first call's arguments.
fn first_call_arguments(s: &Server, body: &Value) -> Value {
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
    serde_json::from_str(args).unwrap()
}

#[test]
fn careless_requests_are_400s_that_name_what_is_wrong() {
    let s = start(&["--tool-fallback", "generic"]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let tool = |f: Value| json!([{"type": "function", "function": f}]);
    let weather = json!({"name": "get_weather", "parameters": {"type": "object", "properties": {}}});
    let with = |key: &str, v: Value| {
        let mut b = json!({"messages": user, "max_tokens": 2});
        b[key] = v;
        b
    };
    let openai = [
        (json!({"messages": [42]}), "messages[0] must be an object"),
        (json!({"messages": [{"role": "user", "content": 42}]}), "messages[0].content must be a string"),
        (json!({"messages": [{"role": "wizard", "content": "hi"}]}), "messages[0].role must be one of"),
        (json!({"messages": [{"content": "hi"}]}), "messages[0].role is missing"),
        (json!({"messages": [{"role": "user"}]}), "messages[0].content is missing"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]}),
            "takes text only",
        ),
        (json!({"messages": [{"role": "user", "content": [{"type": "hologram"}]}]}), "unknown content part type"),
        (json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}), ".text must be a string"),
        (with("model", json!(123)), "`model` must be a string"),
        (with("tools", json!([{"type": "bogus", "function": weather}])), "tools[0].type must be \"function\""),
        (with("tools", tool(json!({"name": ""}))), "the tool name \"\" must be"),
        (
            with(
                "tools",
                json!([{"type": "function", "function": weather}, {"type": "function", "function": weather}]),
            ),
            "declared twice",
        ),
        (with("response_format", json!({"type": "xml"})), "response_format.type"),
        (with("max_tokens", json!(-1)), "`max_tokens` must be an integer from 1"),
        (with("max_tokens", json!(18446744073709551616u128 as f64)), "`max_tokens` must be an integer"),
        (with("max_tokens", json!("10")), "`max_tokens` must be an integer"),
        (with("max_tokens", json!(1.5)), "`max_tokens` must be an integer"),
        (with("max_tokens", json!(0)), "`max_tokens` must be an integer from 1"),
        (with("temperature", json!("hot")), "`temperature` must be a number"),
        (with("stop", json!(["ok", 7])), "`stop` must be"),
        (with("stream_options", json!({"include_usage": "yes"})), "`include_usage` must be a boolean"),
        (with("parallel_tool_calls", json!("no")), "`parallel_tool_calls` must be a boolean"),
    ];
    for (body, says) in openai {
        let (status, msg) = refusal(&s, "/v1/chat/completions", &body);
        assert_eq!(status, 400, "{body}: {msg}");
        assert!(msg.contains(says), "{body}: {msg:?} should say {says:?}");
    }
    let anthropic = |key: &str, v: Value| {
        let mut b = json!({"max_tokens": 2, "messages": user});
        b[key] = v;
        b
    };
    let cases = [
        (
            anthropic("messages", json!([{"role": "user", "content": [{"type": "text", "text": 5}]}])),
            "`text` must be a string",
        ),
        (
            anthropic("messages", json!([{"role": "user", "content": [{"type": "image", "source": {}}]}])),
            "takes text only",
        ),
        (anthropic("top_k", json!(-5)), "`top_k` must be an integer from 0"),
        (anthropic("stop_sequences", json!("x")), "`stop_sequences` must be an array of strings"),
        (anthropic("tools", json!([{"name": "get_weather"}])), "input_schema: a JSON Schema object is required"),
        (anthropic("temperature", json!(1.5)), "`temperature` must be a number from 0 to 1"),
        (anthropic("model", json!(7)), "`model` must be a string"),
        (json!({"max_tokens": "2", "messages": user}), "`max_tokens` must be an integer"),
    ];
    for (body, says) in cases {
        let (status, msg) = refusal(&s, "/v1/messages", &body);
        assert_eq!(status, 400, "{body}: {msg}");
        assert!(msg.contains(says), "{body}: {msg:?} should say {says:?}");
    }
    // Well-formed requests in every shape still pass.
    let fine = [
        with("max_tokens", json!(2.0)),
        json!({"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], "max_tokens": 2,
            "tools": tool(weather.clone()), "stop": "\n\n", "response_format": {"type": "text"},
            "stream_options": null, "seed": -3, "n": 1}),
    ];
    for body in fine {
        let (status, msg) = refusal(&s, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{body}: {msg}");
    }
}

#[test]
fn a_required_call_the_budget_cannot_hold_is_refused_before_generating() {
    let s = start(&["--tool-fallback", "generic"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let ask = |choice: Value, max_tokens: u64, stream: bool| {
        json!({"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": tools,
            "tool_choice": choice, "max_tokens": max_tokens, "stream": stream})
    };
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    // It used to be a 200 with `finish_reason: length` and no call.
    for (choice, stream) in [(json!("required"), false), (named.clone(), false), (json!("required"), true)] {
        let mut r = agent()
            .post(format!("{}/v1/chat/completions", s.base))
            .header("content-type", "application/json")
            .send(ask(choice.clone(), 14, stream).to_string())
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{choice} stream={stream}");
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert_eq!(v["error"]["param"], "max_tokens", "{v}");
        assert!(msg.contains("14 is too few") && msg.contains("must call a tool"), "{msg}");
    }
    // The count it names is the least accepted: a budget of that many is answered, with
    // the call the model completed within it or, cut, with no call and `length` — never
    // a call the budget completed with values the model did not write.
    let (_, msg) = refusal(&s, "/v1/chat/completions", &ask(json!("required"), 1, false));
    let need: u64 = msg.split("takes ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let (status, _) = refusal(&s, "/v1/chat/completions", &ask(named.clone(), need - 1, false));
    assert_eq!(status, 400);
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(ask(named, need, false).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let choice = &v["choices"][0];
    match choice["message"]["tool_calls"].as_array() {
        Some(calls) if !calls.is_empty() => {
            let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
            assert!(args["city"].is_string() && choice["finish_reason"] == "tool_calls", "{v}");
        }
        _ => assert_eq!(choice["finish_reason"], "length", "{v}"),
    }
    // Anthropic `any` likewise; `auto` may answer in text, so it is not refused.
    let (status, msg) = refusal(
        &s,
        "/v1/messages",
        &json!({"max_tokens": 10,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "any"}}),
    );
    assert_eq!(status, 400);
    assert!(msg.contains("10 is too few"), "{msg}");
    let (status, _) = refusal(&s, "/v1/chat/completions", &ask(json!("auto"), 3, false));
    assert_eq!(status, 200);
}

#[test]
fn waiting_requests_start_in_arrival_order_and_only_those_past_the_queue_get_429() {
    // One request generating at a time, five more waiting: each starts in the order it
    // came, and a 429 goes only to a request past `--max-queue`.
    let s = start(&["--tool-fallback", "generic", "--parallel", "1", "--max-queue", "6"]);
    // The generating request must outlast the five arrivals (~0.8 s) however fast the
    // machine decodes: a forced call whose schema takes 400 digits (~800 tokens).
    let digits = json!({"type": "object", "properties": {"n": {"type": "array", "minItems": 400, "maxItems": 400,
        "items": {"type": "integer", "minimum": 0, "maximum": 9}}}, "required": ["n"], "additionalProperties": false});
    let long = json!({"messages": [{"role": "user", "content": "Write 400 digits."}], "max_tokens": 2000,
        "temperature": 0, "stream": true, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "digits", "parameters": digits}}]})
    .to_string();
    let mut first = TcpStream::connect(addr(&s)).unwrap();
    write!(first, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{long}", long.len()).unwrap();
    let mut buf = [0u8; 512];
    let _ = first.read(&mut buf).unwrap(); // it has started
    let finished = std::sync::Mutex::new(Vec::new());
    let overflow = std::thread::scope(|sc| {
        for i in 0..5 {
            let (s, finished) = (&s, &finished);
            sc.spawn(move || {
                let body = json!({"messages": [{"role": "user", "content": format!("Say {i}.")}], "max_tokens": 8,
                    "temperature": 0});
                let (status, _) = refusal(s, "/v1/chat/completions", &body);
                finished.lock().unwrap().push((i, status));
            });
            std::thread::sleep(Duration::from_millis(150)); // arrive one after another
        }
        // The queue (six: the one generating and five waiting) is full now.
        let overflow = refusal(
            &s,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        );
        drop(first); // the long one goes away; the others run
        overflow
    });
    assert_eq!(overflow.0, 429, "{}", overflow.1);
    let finished = finished.into_inner().unwrap();
    assert_eq!(finished, (0..5).map(|i| (i, 200)).collect::<Vec<_>>(), "answered out of arrival order");
}

/// Issue 29 items 2 and 3: a tool whose schema contradicts itself, or has no finite
/// value, is a 400 naming the keywords before anything is generated (streamed or not);
/// a contradiction in a part the call may leave out only removes that part.
#[test]
fn schemas_that_admit_no_value_are_400s_naming_the_keywords() {
    let s = start(&["--tool-fallback", "generic"]);
    let ask = |parameters: Value, stream: bool| {
        json!({"messages": [{"role": "user", "content": "Call f."}], "max_tokens": 40, "stream": stream,
            "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": parameters}}]})
    };
    let obj = |x: Value| json!({"type": "object", "properties": {"x": x}, "required": ["x"]});
    let cases = [
        (obj(json!({"type": "integer", "enum": [100], "maximum": 10})), "`maximum`"),
        (obj(json!({"type": "string", "minLength": 5, "maxLength": 2})), "`minLength` 5 is above `maxLength` 2"),
        (obj(json!({"type": "array", "minItems": 3, "maxItems": 1})), "`minItems` 3 is above `maxItems` 1"),
        (obj(json!({"type": "string", "const": "abc", "pattern": "^x"})), "`pattern`"),
        (obj(json!({"type": "object", "enum": [{"a": 1}], "required": ["b"]})), "`required`"),
        (obj(json!({"type": "number", "minimum": 3, "maximum": 1})), "`minimum`/`maximum`"),
        (obj(json!(false)), "`false`"),
        (
            json!({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}},
                "required": ["next"]}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/node"}},
                "required": ["x"]}),
            "requires itself",
        ),
    ];
    for (parameters, names) in cases {
        for stream in [false, true] {
            let (status, msg) = refusal(&s, "/v1/chat/completions", &ask(parameters.clone(), stream));
            assert_eq!(status, 400, "{parameters} stream={stream}: {msg}");
            assert!(msg.contains("no value satisfies") && msg.contains(names), "{parameters}: {msg}");
        }
    }
    // An optional property that admits nothing is left out; the call is still made.
    let parameters = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
        "days": {"type": "integer", "minimum": 9, "maximum": 2}}, "required": ["city"]});
    // Greedy, with room for the whole call: a sampled city can outrun 40 tokens and end
    // the turn at the limit (seen once on CI's 2-core VM).
    let mut body = ask(parameters, false);
    body["temperature"] = json!(0);
    body["max_tokens"] = json!(128);
    let args = first_call_arguments(&s, &body);
    assert!(args["city"].is_string() && args.get("days").is_none(), "{args}");
}

/// A tool schema that admits no value is refused the same way by `/v1/messages` and
/// `/v1/messages/count_tokens`, and every API names the schema by the request's own path
/// (`tools[0].input_schema…`, `tools[0].parameters…`, `tools[get_weather].function.parameters…`).
/// A legacy `function_call` or `function` message missing its name is a 400 naming it.
#[test]
fn schema_errors_name_the_requests_own_tool_path_on_every_api() {
    let s = start(&["--tool-fallback", "generic"]);
    let empty = json!({"type": "object", "properties": {"n": false}, "required": ["n"]});
    let ask = json!([{"role": "user", "content": "hi"}]);
    let anthropic =
        json!({"max_tokens": 8, "messages": ask, "tools": [{"name": "get_weather", "input_schema": empty}]});
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let (status, v) = crate::common::server::post_json(&s, path, &anthropic);
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{path}: {v}");
        assert!(msg.contains("tools[0].input_schema/properties/n"), "{path}: {msg}");
    }
    let responses = json!({"input": "hi", "max_output_tokens": 8,
        "tools": [{"type": "function", "name": "get_weather", "parameters": empty}]});
    let (status, v) = crate::common::server::post_json(&s, "/v1/responses", &responses);
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("tools[0].parameters/properties/n"), "{v}");
    let chat = json!({"messages": ask, "max_tokens": 8,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": empty}}]});
    let (status, v) = crate::common::server::post_json(&s, "/v1/chat/completions", &chat);
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("tools[get_weather].function.parameters/properties/n"),
        "{v}"
    );
    // A valid schema is counted.
    let fine = json!({"messages": ask, "tools": [{"name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]});
    let (status, v) = crate::common::server::post_json(&s, "/v1/messages/count_tokens", &fine);
    assert_eq!(status, 200, "{v}");
    assert!(v["input_tokens"].as_u64().unwrap() > 10, "{v}");
    // Legacy function calling: the name is required where it is read.
    for (messages, want) in [
        (
            json!([{"role": "assistant", "content": null, "function_call": {"arguments": "{}"}}]),
            "function_call.name is missing",
        ),
        (json!([{"role": "function", "content": "15 C"}]), "messages[0].name is missing"),
        (
            json!([{"role": "user", "content": "hi", "function_call": {"name": "f"}}]),
            "only read on an assistant message",
        ),
    ] {
        let (status, v) = crate::common::server::post_json(&s, "/v1/chat/completions", &json!({"messages": messages}));
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(want), "{want}: {v}");
    }
}
