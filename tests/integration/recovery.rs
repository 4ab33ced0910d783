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
        r#"{"name": "Bob", "age": 3}"#,                         // not a declared tool
        r#"{"name": "get_weather", "arguments": {"city": 5}}"#, // breaks the schema
        r#"{"name": "get_weather", "arguments": [1]}"#,         // arguments not an object
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
