//! Call recovery in `auto` (`tools::recovery`): near-miss calls of declared tools are
//! calls, everything else stays text, the same at every split point of a stream.

use serde_json::json;
use toolgate::tools::recovery::{recover, RecoveringParser, Recovery};
use toolgate::tools::stream::{StreamEvent, StreamParser};
use toolgate::tools::{format, Tool};

fn tools() -> Vec<Tool> {
    serde_json::from_value(json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]))
    .unwrap()
}

#[test]
fn near_miss_forms_of_declared_calls_are_calls() {
    let t = tools();
    let call = ("get_weather".to_string(), r#"{"city":"Oslo"}"#.to_string());
    for text in [
        r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#,
        "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```",
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Oslo\"\n  }\n}\n```",
        r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
        r#"[{"name": "get_weather", "arguments": {"city": "Oslo"}}]"#,
        r#"{"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}"#,
        // OpenAI's own shape, as templates with TabbyAPI-style metadata show calls.
        "```json\n{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}}\n```",
    ] {
        let r = recover(text, &t, true);
        assert_eq!((r.calls.clone(), r.content.as_str()), (vec![call.clone()], ""), "{text}");
    }
    // Text around a fenced call stays content; two calls on two lines are two calls.
    let r = recover(
        "Let me check.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```",
        &t,
        true,
    );
    assert_eq!((r.calls.len(), r.content.as_str()), (1, "Let me check."));
    let two = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}";
    assert_eq!(recover(two, &t, true).calls.len(), 2);
}

#[test]
fn other_json_stays_text() {
    let t = tools();
    for text in [
        r#"{"name": "Bob", "age": 3}"#, // not a declared tool
        r#"{"id": "x", "kind": "f", "function": {"name": "get_weather", "arguments": {}}}"#, // no call's wrapper
        r#"{"name": "get_weather", "arguments": {"city": 5}}"#, // breaks the schema
        r#"{"name": "get_weather", "arguments": [1]}"#, // arguments not an object
        r#"{"name": "get_weather", "arguments": {"city": "Oslo"}, "why": "test"}"#, // other members
        r#"The call would be {"name": "get_weather", "arguments": {"city": "Oslo"}}"#, // mid-line: prose
        "plain text",
    ] {
        let r = recover(text, &t, true);
        assert!(r.calls.is_empty(), "{text}: {r:?}");
        assert_eq!(r.content, text.trim());
    }
    // Native mode takes the arguments as written (no schema check).
    assert_eq!(recover(r#"{"name": "get_weather", "arguments": {"city": 5}}"#, &t, false).calls.len(), 1);
}

fn stream(pieces: &[&str], recovery: bool) -> (Vec<StreamEvent>, usize, String) {
    let fmt = format::for_family("hermes").unwrap();
    let inner = StreamParser::new(fmt, true, 9);
    let mut p = RecoveringParser::new(inner, recovery.then(|| Recovery::new(&tools(), true)));
    let mut ev = Vec::new();
    for piece in pieces {
        ev.extend(p.push(piece));
    }
    ev.extend(p.finish());
    let (out, recovered) = p.into_output();
    (ev, recovered, out.content)
}

#[test]
fn streamed_recovery_holds_candidate_text_and_is_split_invariant() {
    let text = "Sure.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
    let (whole, recovered, content) = stream(&[text], true);
    assert_eq!(recovered, 1);
    assert_eq!(content, "Sure.");
    assert!(
        matches!(&whole[..], [StreamEvent::Content(c), StreamEvent::CallStart { name, .. }, StreamEvent::Arguments { .. }]
        if c.trim() == "Sure." && name == "get_weather"),
        "{whole:?}"
    );
    let joined = |ev: &[StreamEvent]| {
        let mut c = String::new();
        let mut calls = Vec::new();
        for e in ev {
            match e {
                StreamEvent::Content(t) => c.push_str(t),
                StreamEvent::CallStart { name, .. } => calls.push((name.clone(), String::new())),
                StreamEvent::Arguments { fragment, .. } => calls.last_mut().unwrap().1.push_str(fragment),
                StreamEvent::Reasoning(_) => {}
            }
        }
        (c.trim().to_string(), calls)
    };
    for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        let (ev, n, _) = stream(&[&text[..i], &text[i..]], true);
        assert_eq!((joined(&ev), n), (joined(&whole), 1), "split at {i}");
    }
    // Off: the same text is content, as the model wrote it.
    let (ev, n, content) = stream(&[text], false);
    assert_eq!((n, content.as_str()), (0, text));
    assert!(ev.iter().all(|e| matches!(e, StreamEvent::Content(_))));
    // A real call in the family's layout is not touched, and text after it is kept.
    let (_, n, _) =
        stream(&["<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"], true);
    assert_eq!(n, 0);
}

#[test]
fn recovered_calls_get_ids_in_the_formats_shape() {
    // Mistral's templates refuse ids that are not nine letters and digits: a recovered
    // call goes back to them in the next turn, so it gets such an id too.
    let fmt = format::for_family("mistral").unwrap();
    let mut p = RecoveringParser::new(StreamParser::new(fmt, true, 5), Some(Recovery::new(&tools(), true)));
    p.push(r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#);
    p.finish();
    let (out, n) = p.into_output();
    assert_eq!(n, 1);
    let id = &out.calls[0].id;
    assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
}

/// `response_format` beside tools in `auto` (issue 23), on Qwen2.5-Coder-0.5B: every
/// answer is either calls valid for their tool or text valid for the format, streamed
/// or not. Before, the format was dropped whenever tools were present.
#[test]
fn a_response_format_beside_tools_in_auto_shapes_the_text_answer() {
    use std::io::Read;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("serve")
        .arg("--model")
        .arg(crate::common::model(crate::common::QWEN_CODER))
        .args(["--call-recovery", "off"]);
    let s = crate::common::server::spawn_on_any_port(cmd).expect("server did not come up");
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string", "maxLength": 200},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["answer", "confidence"]});
    let format_ok = jsonschema::validator_for(&schema).unwrap();
    let call_ok = jsonschema::validator_for(&tools()[0].function.parameters).unwrap();
    let (mut answers, mut calls) = (0, 0);
    for q in ["What is the capital of France?", "What's the weather in Oslo right now?", "Write a haiku about autumn."]
    {
        for stream in [false, true] {
            let body = json!({"messages": [
                    {"role": "system", "content": "Answer in JSON with keys answer and confidence, or call a tool for live data."},
                    {"role": "user", "content": q}],
                "tools": [{"type": "function", "function": tools()[0].function}], "tool_choice": "auto",
                "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": true, "schema": schema}},
                "max_tokens": 80, "temperature": 0, "stream": stream, "cache_prompt": false});
            let mut r = crate::common::server::agent()
                .post(format!("{}/v1/chat/completions", s.base))
                .header("content-type", "application/json")
                .send(body.to_string())
                .unwrap();
            let mut text = String::new();
            r.body_mut().as_reader().read_to_string(&mut text).unwrap();
            // The message, whole or put together from the stream's deltas.
            let (content, tool_args, finish) = if stream {
                let (mut content, mut args, mut finish) = (String::new(), Vec::<String>::new(), String::new());
                for line in text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|l| *l != "[DONE]") {
                    let v: serde_json::Value = serde_json::from_str(line).unwrap();
                    let c = &v["choices"][0];
                    content += c["delta"]["content"].as_str().unwrap_or("");
                    for t in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                        let i = t["index"].as_u64().unwrap() as usize;
                        args.resize(args.len().max(i + 1), String::new());
                        args[i] += t["function"]["arguments"].as_str().unwrap_or("");
                    }
                    finish = c["finish_reason"].as_str().map(str::to_string).unwrap_or(finish);
                }
                (content, args, finish)
            } else {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                let m = &v["choices"][0]["message"];
                let args = m["tool_calls"].as_array().into_iter().flatten();
                let args = args.map(|t| t["function"]["arguments"].as_str().unwrap().to_string()).collect();
                (m["content"].as_str().unwrap_or("").to_string(), args, v["choices"][0]["finish_reason"].to_string())
            };
            if tool_args.is_empty() {
                let v: serde_json::Value =
                    serde_json::from_str(&content).unwrap_or_else(|e| panic!("{q}: {e}: {content}"));
                assert!(format_ok.is_valid(&v) && finish.contains("stop"), "{q} stream={stream}: {content} {finish}");
                answers += 1;
            } else {
                for a in &tool_args {
                    assert!(call_ok.is_valid(&serde_json::from_str(a).unwrap()), "{q}: {a}");
                }
                assert!(content.trim().is_empty() && finish.contains("tool_calls"), "{q}: {content:?} {finish}");
                calls += 1;
            }
        }
    }
    // This model answers the first question in the format, and calls for the others.
    assert!(answers >= 2 && calls >= 2, "answers {answers}, calls {calls}");
}

/// The streamed content is byte for byte the aggregate's, at every split point, when
/// text comes before a call: a recovered bare call, a fenced one, and one in the
/// family's own layout (the whitespace before a call is never streamed, as it is not in
/// the aggregate).
#[test]
fn streamed_content_is_the_aggregate_before_every_kind_of_call() {
    let call = r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#;
    for text in [
        format!("Sure.\n{call}"),
        format!("Sure.\n\n```json\n{call}\n```"),
        format!("Sure.\n<tool_call>\n{call}\n</tool_call>"),
        format!("Let me see:  \n{call}\nDone."),
    ] {
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let (ev, _, content) = stream(&[&text[..i], &text[i..]], true);
            let streamed: String = ev
                .iter()
                .filter_map(|e| if let StreamEvent::Content(t) = e { Some(t.as_str()) } else { None })
                .collect();
            assert_eq!(streamed, content, "{text:?} split at {i}: {ev:?}");
        }
    }
}

/// A call the budget cut is neither a call nor content, in the family's layout and as a
/// recovered bare call; calls completed before it stay.
#[test]
fn a_call_cut_by_the_budget_is_dropped() {
    let run = |text: &str, unfinished: &str| {
        let fmt = format::for_family("hermes").unwrap();
        let mut p = RecoveringParser::new(StreamParser::new(fmt, true, 9), Some(Recovery::new(&tools(), true)));
        p.push(text);
        p.cut(unfinished);
        p.finish();
        let (out, _) = p.into_output();
        (out.content, out.calls.iter().map(|c| c.function.arguments.clone()).collect::<Vec<_>>(), out.truncated)
    };
    let cut = r#"{"name": "get_weather", "arguments": {"city": "Par"#;
    assert_eq!(run(&format!("Checking.\n{cut}"), cut), ("Checking.".to_string(), vec![], true));
    let hermes = format!("<tool_call>\n{cut}");
    assert_eq!(run(&format!("Checking.\n{hermes}"), &hermes), ("Checking.".to_string(), vec![], true));
    let done = r#"<tool_call>
{"name": "get_weather", "arguments": {"city": "Oslo"}}
</tool_call>
"#;
    let (content, calls, truncated) = run(&format!("{done}{hermes}"), &hermes);
    assert_eq!((content.as_str(), calls, truncated), ("", vec![r#"{"city": "Oslo"}"#.to_string()], true));
}
