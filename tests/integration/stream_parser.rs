//! The streaming tool-call parser gives the same turn whatever the split points, and
//! its deltas add up to that turn, for every family format, in both reading modes.

use toolgate::tools::format;
use toolgate::tools::stream::{ParsedOutput, StreamEvent, StreamParser};

/// Outputs in the shape models write them (the first four are verbatim SmolLM2 and
/// Gemma 3 constrained outputs from `tests/tools.rs` runs).
const OUTPUTS: &[&str] = &[
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}</tool_call>",
    "I will check.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"rust \\\"async\\\" {braces} </tool_call> inside\", \"n\": [1, 2, {\"deep\": true}]}}\n</tool_call>",
    "Sure!  Let me look that up for you. <tool_call>{\"name\":\"f\",\"arguments\":{\"x\":-1.5e3,\"y\":null}}</tool_call>  ",
    "  Plain answer with no call at all, ending in a lone < sign <",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"emoji\": \"héllo wörld 🌍\", \"cjk\": \"東京\"}}</tool_call> done",
    "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"reordered\"}</tool_call>",
    "<tool_call>{\"name\": \"stringy\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
    "<tool_call>not json at all</tool_call> and then text",
    "<tool_call>{\"name\": \"scalar\", \"arguments\": 42}</tool_call>",
    "Text <tool_call>{\"name\": \"cut\", \"arguments\": {\"city\": \"Par",
    "Text <tool_call>{\"name\": \"cu",
    "<tool_c",
];

fn run(fmt: &format::ToolFormat, incremental: bool, pieces: &[&str]) -> (Vec<StreamEvent>, ParsedOutput) {
    let mut p = StreamParser::new(Some(fmt.clone()), incremental, 1);
    let mut ev = Vec::new();
    for piece in pieces {
        ev.extend(p.push(piece));
    }
    ev.extend(p.finish());
    (ev, p.into_output())
}

/// Rebuild a turn from its deltas alone, checking their order on the way.
fn aggregate(ev: &[StreamEvent]) -> ParsedOutput {
    let mut out = ParsedOutput::default();
    for e in ev {
        match e {
            StreamEvent::Content(c) => {
                assert!(!c.is_empty(), "empty content delta");
                out.content.push_str(c);
            }
            StreamEvent::CallStart { index, id, name } => {
                assert_eq!(*index, out.calls.len(), "call indexes are dense and ordered");
                out.calls.push(toolgate::tools::ToolCall {
                    id: id.clone(),
                    kind: "function".into(),
                    function: toolgate::tools::CalledFunction { name: name.clone(), arguments: String::new() },
                });
            }
            StreamEvent::Arguments { index, fragment } => {
                assert_eq!(*index + 1, out.calls.len(), "arguments belong to the newest call");
                out.calls[*index].function.arguments.push_str(fragment);
            }
            StreamEvent::Reasoning(r) => {
                assert!(out.content.is_empty() && out.calls.is_empty(), "reasoning comes first");
                assert!(!r.is_empty(), "empty reasoning delta");
                out.reasoning.push_str(r);
            }
        }
    }
    out
}

fn char_splits(s: &str) -> Vec<usize> {
    (0..=s.len()).filter(|&i| s.is_char_boundary(i)).collect()
}

#[test]
fn every_split_point_gives_the_same_turn() {
    for fmt in format::all().unwrap() {
        for incremental in [false, true] {
            for text in OUTPUTS {
                let (whole_ev, whole) = run(&fmt, incremental, &[text]);
                let mut agg = aggregate(&whole_ev);
                agg.failures = whole.failures;
                agg.truncated = whole.truncated;
                assert_eq!(agg, whole, "{} incremental={incremental}: deltas ≠ turn for {text:?}", fmt.family);
                let splits = char_splits(text);
                for &i in &splits {
                    let (ev, out) = run(&fmt, incremental, &[&text[..i], &text[i..]]);
                    assert_eq!(out, whole, "{} incremental={incremental} split at {i} of {text:?}", fmt.family);
                    let mut agg = aggregate(&ev);
                    agg.failures = out.failures;
                    agg.truncated = out.truncated;
                    assert_eq!(agg, whole);
                }
                // Every character its own piece (the finest a tokenizer can split text).
                let pieces: Vec<&str> = splits.windows(2).map(|w| &text[w[0]..w[1]]).collect();
                let (ev, out) = run(&fmt, incremental, &pieces);
                assert_eq!(out, whole, "{} incremental={incremental} char by char: {text:?}", fmt.family);
                let mut agg = aggregate(&ev);
                agg.failures = out.failures;
                agg.truncated = out.truncated;
                assert_eq!(agg, whole);
            }
        }
    }
}

#[test]
fn reads_calls_content_and_failures_as_a_client_expects() {
    let fmt = format::for_family("hermes").unwrap().unwrap();
    for incremental in [false, true] {
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[1]]);
        assert_eq!(out.content, "");
        assert_eq!(out.calls.len(), 2);
        assert_eq!(out.calls[0].function.name, "get_weather");
        assert_eq!(out.calls[0].function.arguments, r#"{"city": "Paris", "unit": "celsius"}"#);
        assert_eq!(out.calls[1].function.arguments, r#"{"tz": "Europe/Paris"}"#);
        assert_ne!(out.calls[0].id, out.calls[1].id);

        // The end marker inside a string argument does not end the call.
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[2]]);
        assert_eq!(out.content, "I will check.");
        let args: serde_json::Value = serde_json::from_str(&out.calls[0].function.arguments).unwrap();
        assert_eq!(args["n"][2]["deep"], true);
        assert!(args["q"].as_str().unwrap().contains("</tool_call>"));

        let (_, out) = run(&fmt, incremental, &[OUTPUTS[3]]);
        assert_eq!(out.content, "Sure!  Let me look that up for you.");
        assert_eq!(out.calls[0].function.arguments, r#"{"x":-1.5e3,"y":null}"#);

        let (_, out) = run(&fmt, incremental, &[OUTPUTS[4]]);
        assert_eq!(out.content, OUTPUTS[4].trim());

        // Key order and string-encoded arguments are read whole in both modes.
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[6]]);
        assert_eq!(
            (out.calls[0].function.name.as_str(), out.calls[0].function.arguments.as_str()),
            ("reordered", r#"{"a": 1}"#)
        );
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[7]]);
        assert_eq!(out.calls[0].function.arguments, r#"{"a": 1}"#);

        // A body that does not parse stays visible as content and counts as a failure.
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[8]]);
        assert_eq!((out.calls.len(), out.failures), (0, 1));
        assert_eq!(out.content, "<tool_call>not json at all</tool_call> and then text");

        // A call cut before its name was known is dropped: truncated, not content.
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[11]]);
        assert_eq!((out.content.as_str(), out.calls.len(), out.failures, out.truncated), ("Text", 0, 0, true));
        // A half marker at the end is content (it never became a call).
        let (_, out) = run(&fmt, incremental, &[OUTPUTS[12]]);
        assert_eq!(out.content, "<tool_c");
    }
    // Cut inside the arguments: incremental mode already streamed the call, so it stays
    // (with the arguments as far as they went); whole mode never saw it close.
    let (_, out) = run(&fmt, true, &[OUTPUTS[10]]);
    assert_eq!((out.content.as_str(), out.calls[0].function.arguments.as_str()), ("Text", r#"{"city": "Par"#));
    assert!(out.truncated);
    let (_, out) = run(&fmt, false, &[OUTPUTS[10]]);
    assert_eq!((out.content.as_str(), out.calls.len(), out.failures, out.truncated), ("Text", 0, 0, true));
    let (_, out) = run(&fmt, true, &[OUTPUTS[0]]);
    assert!(!out.truncated);
}

#[test]
fn incremental_mode_streams_arguments_as_they_are_generated() {
    let fmt = format::for_family("hermes").unwrap().unwrap();
    let text = OUTPUTS[0];
    let pieces: Vec<&str> = char_splits(text).windows(2).map(|w| &text[w[0]..w[1]]).collect();
    let mut p = StreamParser::new(Some(fmt), true, 1);
    let mut seen_name_at = None;
    let mut fragments = 0;
    for (i, piece) in pieces.iter().enumerate() {
        for e in p.push(piece) {
            match e {
                StreamEvent::CallStart { name, .. } => {
                    assert_eq!(name, "get_weather");
                    seen_name_at = Some(i);
                }
                StreamEvent::Arguments { fragment, .. } => {
                    fragments += 1;
                    assert!(!fragment.contains("</"), "the end marker leaked: {fragment:?}");
                }
                StreamEvent::Content(c) => panic!("content {c:?}"),
                StreamEvent::Reasoning(r) => panic!("reasoning {r:?}"),
            }
        }
    }
    // The name is out before the arguments begin, and the arguments stream piece by piece.
    let name_end = text.find("\"arguments\": ").unwrap() + "\"arguments\": ".len();
    assert!(seen_name_at.unwrap() <= name_end);
    assert_eq!(fragments, r#"{"city": "Paris"}"#.len());
    assert!(p.finish().is_empty());
}

#[test]
fn text_only_turns_are_trimmed_like_the_whole() {
    let text = "\n  Hello <tool_call> is just text here.  \n";
    for i in char_splits(text) {
        let mut p = StreamParser::new(None, false, 0);
        let mut ev = p.push(&text[..i]);
        ev.extend(p.push(&text[i..]));
        ev.extend(p.finish());
        assert_eq!(aggregate(&ev).content, text.trim());
        assert_eq!(p.output().content, text.trim());
    }
}

/// The assistant turn a real template renders for `reasoning` + one call, as the model
/// would write it (the text after the last assistant header, up to its end token).
fn rendered_reasoning_turn(template_file: &str, reasoning: &str) -> (String, toolgate::template::ChatSetup) {
    use serde_json::json;
    let path = crate::common::template(template_file);
    let src = std::fs::read_to_string(&path).unwrap();
    let templates = toolgate::template::source::GgufTemplates { default: Some(src), tool_use: None };
    let setup = toolgate::template::inspect(&templates, None, None).unwrap();
    let call = json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}});
    let mut req = toolgate::template::RenderRequest::new(vec![
        json!({"role": "user", "content": "Weather in Paris?"}),
        json!({"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [call]}),
    ]);
    req.tools =
        Some(vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}}})]);
    req.add_generation_prompt = false;
    let text = setup.template.render(&req).unwrap();
    let turn = &text[text.rfind(reasoning).and_then(|at| text[..at].rfind("assistant")).unwrap()..];
    let turn = turn.split_once('\n').map(|(_, t)| t).unwrap_or(turn);
    let end = ["<|im_end|>", "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>", "<|eot_id|>"]
        .iter()
        .filter_map(|m| turn.find(m))
        .min()
        .unwrap_or(turn.len());
    (turn[..end].to_string(), setup)
}

#[test]
fn reasoning_blocks_of_real_templates_go_to_reasoning_content_at_every_split() {
    let reasoning = "The user wants the weather.\nI should call get_weather with city Paris.";
    let (turn, setup) = rendered_reasoning_turn("Qwen-Qwen3-0.6B.jinja", reasoning);
    assert_eq!(setup.reasoning, Some(("<think>", "</think>")), "{turn}");
    assert!(turn.starts_with("<think>") && turn.contains("<tool_call>"), "{turn:?}");
    let fmt = format::for_family(setup.family()).unwrap().expect("Qwen 3 writes the hermes format");
    for incremental in [false, true] {
        for at in char_splits(&turn) {
            let mut p =
                StreamParser::new(Some(fmt.clone()), incremental, 1).with_reasoning("<think>", "</think>", false);
            let mut ev = p.push(&turn[..at]);
            ev.extend(p.push(&turn[at..]));
            ev.extend(p.finish());
            let out = p.into_output();
            assert_eq!(out.reasoning, reasoning, "split at {at}: {turn:?}");
            assert_eq!(out.content, "", "split at {at}");
            assert_eq!(out.calls.len(), 1, "split at {at}: {out:?}");
            assert_eq!(out.calls[0].function.arguments, "{\"city\": \"Paris\"}");
            let agg = aggregate(&ev);
            assert_eq!((agg.reasoning, agg.content), (out.reasoning, out.content));
        }
    }
}

#[test]
fn reasoning_edge_cases() {
    let run = |pieces: &[&str], inside: bool| {
        let mut p = StreamParser::new(None, false, 1).with_reasoning("<think>", "</think>", inside);
        for piece in pieces {
            p.push(piece);
        }
        p.finish();
        let o = p.into_output();
        (o.reasoning, o.content)
    };
    // The prompt already opened the block (DeepSeek-R1 style).
    assert_eq!(run(&["Hmm, 2+2", ".\n</think>\n\n4"], true), ("Hmm, 2+2.".into(), "4".into()));
    // No block: everything is content, even a marker later on.
    assert_eq!(run(&["Answer: use <think> tags"], false), ("".into(), "Answer: use <think> tags".into()));
    // Cut off inside the block: all reasoning, no content.
    assert_eq!(run(&["<think>still thinking"], false), ("still thinking".into(), "".into()));
    // A lone partial marker at the end is content.
    assert_eq!(run(&["  <thi"], false), ("".into(), "<thi".into()));
    // An empty block (thinking disabled) leaves only the answer.
    assert_eq!(run(&["<think>\n\n</think>\n\nParis."], false), ("".into(), "Paris.".into()));
}

/// gpt-oss (harmony, issue 22): the analysis channel is reasoning, `final` is the
/// answer without its headers, and a call reads the same in either header order (the
/// model's `<|channel|>commentary to=functions.NAME <|constrain|>json` and the
/// template's ` to=functions.NAME<|channel|>commentary json`), at every split point,
/// also when generation stopped on `<|call|>` (never shown as text).
#[test]
fn harmony_channels_and_both_call_header_orders_at_every_split() {
    let path = crate::common::template("openai-gpt-oss-120b.jinja");
    let src = std::fs::read_to_string(&path).unwrap();
    let templates = toolgate::template::source::GgufTemplates { default: Some(src), tool_use: None };
    let setup = toolgate::template::inspect(&templates, None, None).unwrap();
    let (start, end) = setup.reasoning.expect("harmony's analysis channel is read as reasoning");
    let fmt = setup.layout.format.clone().expect("a derived layout");
    let think = "<|channel|>analysis<|message|>User wants the weather.<|end|><|start|>assistant";
    let model_order = format!(
        "{think}<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{{\"city\":\"Oslo\"}}"
    );
    let template_order =
        format!("{think} to=functions.get_weather<|channel|>commentary json<|message|>{{\"city\":\"Oslo\"}}");
    let answer = format!("{think}<|channel|>final<|message|>It is sunny in Oslo.");
    let preamble = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>";
    for (text, calls, content, reasoning) in [
        (model_order.as_str(), 1, "", "User wants the weather."),
        (template_order.as_str(), 1, "", "User wants the weather."),
        (answer.as_str(), 0, "It is sunny in Oslo.", "User wants the weather."),
        (preamble, 1, "Checking.", ""),
    ] {
        for incremental in [false, true] {
            for at in char_splits(text) {
                let mut p = StreamParser::new(Some(fmt.clone()), incremental, 1).with_reasoning(start, end, false);
                let mut ev = p.push(&text[..at]);
                ev.extend(p.push(&text[at..]));
                // As the engine does when generation stopped on an end-of-generation token.
                ev.extend(p.end_of_turn("<|call|>"));
                ev.extend(p.finish());
                let out = p.into_output();
                assert_eq!(
                    (out.calls.len(), out.content.as_str(), out.reasoning.as_str()),
                    (calls, content, reasoning),
                    "split at {at}: {text:?} → {out:?}"
                );
                assert!(!out.truncated, "split at {at}: {text:?}");
                if calls == 1 {
                    assert_eq!(out.calls[0].function.name, "get_weather");
                    assert_eq!(out.calls[0].function.arguments, "{\"city\":\"Oslo\"}");
                }
                let agg = aggregate(&ev);
                assert_eq!((agg.reasoning, agg.content), (out.reasoning, out.content), "split at {at}");
            }
        }
    }
    // Text that is not harmony passes through as it was.
    let mut p = StreamParser::new(Some(fmt), false, 1).with_reasoning(start, end, false);
    p.push("Just text, no headers.");
    p.finish();
    assert_eq!(p.output().content, "Just text, no headers.");
}
