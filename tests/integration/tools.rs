//! Tool calling end to end on the real SmolLM2 with the generic fallback, and the
//! parser on real template output.

use crate::common;

use serde_json::{json, Value};
use toolgate::engine::chat::{tool_turn, ToolMode};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::model::DeviceChoice;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{gate, ChatTemplate, RenderRequest, ToolFallback};
use toolgate::tools::{format, parse, Tool, ToolChoice};

fn tools() -> Vec<Tool> {
    serde_json::from_value(json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "description": "Add two integers",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]}}}
    ]))
    .unwrap()
}

fn valid(call: &toolgate::tools::ToolCall) -> bool {
    let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
    match call.function.name.as_str() {
        "get_weather" => {
            args["city"].is_string()
                && args.get("unit").is_none_or(|u| u == "celsius" || u == "fahrenheit")
                && args.as_object().unwrap().keys().all(|k| k == "city" || k == "unit")
        }
        "add" => args["a"].is_i64() && args["b"].is_i64() && args.as_object().unwrap().len() == 2,
        _ => false,
    }
}

/// Constrained calls: a call `max_tokens` cuts is dropped (`cut_call`, finish
/// `length`), never returned half-written nor completed with values the model did not
/// write, so every call returned is complete.
fn complete(turn: &toolgate::engine::chat::ChatTurn) -> &[toolgate::tools::ToolCall] {
    let closed = turn.tool_calls.iter().all(|c| serde_json::from_str::<Value>(&c.function.arguments).is_ok());
    assert!(closed, "a constrained call was returned cut off: {turn:?}");
    if turn.cut_call {
        assert_eq!(turn.finish_reason, "length", "{turn:?}");
    } else if !turn.tool_calls.is_empty() {
        assert_eq!(turn.finish_reason, "tool_calls", "{turn:?}");
    }
    &turn.tool_calls
}

#[test]
fn every_format_file_parses() {
    let all = format::all().unwrap();
    assert!(all.iter().any(|f| f.family == "hermes"));
    assert!(all.iter().any(|f| f.family == "generic"));
}

#[test]
fn parser_reads_calls_rendered_by_real_templates() {
    let call = json!({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}});
    for (template, family) in
        [("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"), ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes")]
    {
        let src = std::fs::read_to_string(crate::common::template(template)).unwrap();
        let t = ChatTemplate::new(template, src).unwrap();
        let mut req = RenderRequest::new(vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "", "tool_calls": [call.clone(), call.clone()]}),
        ]);
        req.add_generation_prompt = false;
        let out = t.render(&req).unwrap();
        // The assistant turn only.
        let turn = &out[out.rfind("assistant").unwrap()..];
        let f = format::for_family(family).unwrap().unwrap();
        let (_, calls, failures) = parse(&f, turn);
        assert_eq!(failures, 0, "{template}");
        assert_eq!(calls.len(), 2, "{template}: {turn}");
        let args: Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris", "unit": "celsius"}));
    }
    let (t, _) = toolgate::template::source::generic().unwrap();
    let mut req = RenderRequest::new(vec![json!({"role": "assistant", "content": "ok", "tool_calls": [call]})]);
    req.add_generation_prompt = false;
    let (content, calls, _) = parse(&format::for_family("generic").unwrap().unwrap(), &t.render(&req).unwrap());
    assert_eq!(calls[0].function.name, "get_weather");
    assert!(content.contains("ok"));
}

#[test]
fn constrained_tool_calls_on_smollm2_are_always_valid() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let setup = gate("smollm2", &templates, Some("llama"), None, ToolFallback::Generic).unwrap();
    let tools = tools();
    let params = GenerateParams { max_tokens: 48, ..GenerateParams::default() };
    let msg = |q: &str| vec![json!({"role": "user", "content": q})];
    let none =
        tool_turn(&mut engine, &setup, msg("Hi"), &tools, &ToolChoice::None, true, ToolMode::Constrained, &params)
            .unwrap();
    assert!(none.tool_calls.is_empty());
    for q in ["What is the weather in Paris?", "Tell me a joke."] {
        // required, parallel: at least one call, every call valid.
        let turn =
            tool_turn(&mut engine, &setup, msg(q), &tools, &ToolChoice::Required, true, ToolMode::Constrained, &params)
                .unwrap();
        assert!(!turn.tool_calls.is_empty(), "{q}: {turn:?}");
        assert!(complete(&turn).iter().all(valid), "{q}: {turn:?}");
        assert_eq!(turn.finish_reason, "tool_calls", "{turn:?}");
        assert_eq!(turn.parse_failures, 0);
        // required, not parallel: exactly one.
        let one = tool_turn(
            &mut engine,
            &setup,
            msg(q),
            &tools,
            &ToolChoice::Required,
            false,
            ToolMode::Constrained,
            &params,
        )
        .unwrap();
        assert_eq!(one.tool_calls.len(), 1, "{q}: {one:?}");
        assert!(valid(&one.tool_calls[0]));
        // named: only that function.
        let named = tool_turn(
            &mut engine,
            &setup,
            msg(q),
            &tools,
            &ToolChoice::Named("add".into()),
            false,
            ToolMode::Constrained,
            &params,
        )
        .unwrap();
        assert_eq!(named.tool_calls.len(), 1);
        assert_eq!(named.tool_calls[0].function.name, "add");
        assert!(valid(&named.tool_calls[0]));
        // auto: whatever the model does, any call it starts is valid.
        let auto =
            tool_turn(&mut engine, &setup, msg(q), &tools, &ToolChoice::Auto, true, ToolMode::Constrained, &params)
                .unwrap();
        assert!(complete(&auto).iter().all(valid), "{q}: {auto:?}");
    }
    // Unknown named tool: a clear error.
    let err = tool_turn(
        &mut engine,
        &setup,
        msg("x"),
        &tools,
        &ToolChoice::Named("nope".into()),
        true,
        ToolMode::Constrained,
        &params,
    )
    .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn native_mode_parses_what_the_model_writes() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let setup = gate("smollm2", &templates, Some("llama"), None, ToolFallback::Generic).unwrap();
    let params = GenerateParams { max_tokens: 40, ..GenerateParams::default() };
    let turn = tool_turn(
        &mut engine,
        &setup,
        vec![json!({"role": "user", "content": "What is the weather in Paris?"})],
        &tools(),
        &ToolChoice::Auto,
        true,
        ToolMode::Native,
        &params,
    )
    .unwrap();
    // No guarantee in native mode; the parser must not lose text or invent calls.
    assert!(turn.tool_calls.iter().all(|c| serde_json::from_str::<Value>(&c.function.arguments).is_ok()));
    assert!(!turn.content.is_empty() || !turn.tool_calls.is_empty());
}

#[test]
fn streamed_deltas_add_up_to_the_turn_and_cancel_stops_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use toolgate::engine::chat::prepare_turn;
    use toolgate::tools::stream::StreamEvent;

    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let setup = gate("smollm2", &templates, Some("llama"), None, ToolFallback::Generic).unwrap();
    let tools = tools();
    let msg = vec![json!({"role": "user", "content": "What is the weather in Paris and in Rome?"})];
    let params = GenerateParams { max_tokens: 60, ..GenerateParams::default() };
    for (choice, mode) in [
        (ToolChoice::Required, ToolMode::Constrained),
        (ToolChoice::Auto, ToolMode::Constrained),
        (ToolChoice::Auto, ToolMode::Native),
    ] {
        let prepared = prepare_turn(&mut engine, &setup, msg.clone(), &tools, &choice, true, mode).unwrap();
        let mut events = Vec::new();
        let turn = prepared.run(&mut engine, &params, |e| events.push(e)).unwrap();
        let mut content = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for e in &events {
            match e {
                StreamEvent::Content(c) => content.push_str(c),
                StreamEvent::CallStart { index, id, name } => {
                    assert_eq!(*index, calls.len());
                    calls.push((id.clone(), name.clone(), String::new()));
                }
                StreamEvent::Arguments { index, fragment } => calls[*index].2.push_str(fragment),
                StreamEvent::Reasoning(r) => panic!("no reasoning markers in the generic template: {r:?}"),
            }
        }
        assert_eq!(content, turn.content, "{choice:?} {mode:?}");
        let want: Vec<_> = turn
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.function.name.clone(), c.function.arguments.clone()))
            .collect();
        assert_eq!(calls, want, "{choice:?} {mode:?}");
        if mode == ToolMode::Constrained && choice == ToolChoice::Required {
            assert!(complete(&turn).iter().all(valid), "{turn:?}");
            // Arguments arrive in pieces as tokens are generated, not in one lump.
            let fragments = events.iter().filter(|e| matches!(e, StreamEvent::Arguments { .. })).count();
            assert!(fragments > turn.tool_calls.len(), "{events:?}");
        }
    }

    // Cancel from the callback: generation stops before the next token.
    let cancel = Arc::new(AtomicBool::new(false));
    let params = GenerateParams { max_tokens: 60, cancel: Some(cancel.clone()), ..GenerateParams::default() };
    let prepared =
        prepare_turn(&mut engine, &setup, msg, &tools, &ToolChoice::Required, true, ToolMode::Constrained).unwrap();
    let turn = prepared.run(&mut engine, &params, |_| cancel.store(true, Ordering::Relaxed)).unwrap();
    assert_eq!(turn.finish_reason, "cancelled");
    assert!(turn.completion_tokens < 30, "{turn:?}");
}

/// Jump-forward decoding (`GenerateParams::jump_forward`) on three vocabularies (gpt2
/// BPE with the generic layout, Qwen's with its own Hermes template and control-token
/// markers, Gemma 3's SentencePiece): the text the constraint forces — keys in schema
/// order, `", "`, the named tool's name — goes through the model in chunks, and every
/// call is as valid as without it.
#[test]
fn jump_forward_feeds_forced_text_in_chunks_and_calls_stay_valid() {
    // One call of five required properties: strings, an integer, an enum, a boolean.
    let tools: Vec<Tool> = serde_json::from_value(common::fixture("book_flight_tools.json")).unwrap();
    let msg = vec![json!({"role": "user", "content": "Book two business seats from Oslo to Rome, refundable."})];
    for (file, arch) in [(common::SMOLLM2, "llama"), (common::QWEN_CODER, "qwen2"), (common::GEMMA3, "gemma3")] {
        let mut engine = Engine::load(common::model(file), DeviceChoice::Cpu).unwrap();
        let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
        let setup = gate(file, &templates, Some(arch), None, ToolFallback::Generic).unwrap();
        for jump in [false, true] {
            let params = GenerateParams {
                max_tokens: 160,
                sampling: toolgate::sampling::SamplingParams::greedy(),
                jump_forward: jump,
                ..GenerateParams::default()
            };
            let choice = ToolChoice::Named("book_flight".into());
            let turn =
                tool_turn(&mut engine, &setup, msg.clone(), &tools, &choice, false, ToolMode::Constrained, &params)
                    .unwrap();
            assert_eq!(turn.tool_calls.len(), 1, "{file}, jump {jump}: {turn:?}");
            let args: Value = serde_json::from_str(&turn.tool_calls[0].function.arguments).unwrap();
            let keys: Vec<&str> = args.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, ["origin", "destination", "passengers", "cabin", "refundable"], "{file}: {args}");
            assert!(args["passengers"].as_i64().is_some_and(|n| (1..=9).contains(&n)), "{file}: {args}");
            assert!(["economy", "business", "first"].contains(&args["cabin"].as_str().unwrap()), "{file}: {args}");
            assert!(args["refundable"].is_boolean(), "{file}: {args}");
            let forced = turn.timings.forced_tokens;
            match jump {
                false => assert_eq!(forced, 0),
                // The keys and separators between the values alone are several tokens.
                true => assert!(forced >= 4 && forced < turn.completion_tokens, "{file}: {forced} of {turn:?}"),
            }
        }
    }
}

/// Jump-forward keeps the model's own tokens: a forced run is only a draft, each of
/// whose tokens the model's step decides from the chunk's row for its position. A
/// model's token often runs past the end of a forced run into text it chooses (`"` of
/// a key's closing quote and the value's first letters; `", "` and the next key), or
/// spells forced text in pieces the tokenizer would not choose; either way the turn is
/// the very token sequence decoding gives one step at a time — greedy, sampled with a
/// seed, with whole rows (log-probabilities) or with scored candidates. The waste is
/// counted: drafts fed, and draft tokens the model did not take.
#[test]
fn jump_forward_keeps_the_tokens_a_plain_decode_gives_across_run_boundaries() {
    // On Qwen2.5-Coder (BPE) the model's tokens cross forced runs' ends ('>\n', '}}\n');
    // on Gemma 3 (SentencePiece) it spells forced text in pieces the tokenizer would not
    // choose ('t' + 'ool' for 'tool'). Both times the draft is only a proposal.
    use std::sync::Arc;
    let tools: Vec<Tool> = serde_json::from_value(common::fixture("book_flight_tools.json")).unwrap();
    let msg = vec![json!({"role": "user", "content": "Book two business seats from Oslo to Rome, refundable."})];
    for (name, arch, min_forced) in [(common::QWEN_CODER, "qwen2", 20), (common::GEMMA3, "gemma3", 20)] {
        let mut engine = Engine::load(common::model(name), DeviceChoice::Cpu).unwrap();
        let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
        let setup = gate(name, &templates, Some(arch), None, ToolFallback::Generic).unwrap();
        let choice = ToolChoice::Named("book_flight".into());
        let mut run_with = |jump: bool, logprobs: Option<usize>, sampling: toolgate::sampling::SamplingParams| {
            let params =
                GenerateParams { max_tokens: 160, logprobs, jump_forward: jump, sampling, ..GenerateParams::default() };
            tool_turn(&mut engine, &setup, msg.clone(), &tools, &choice, false, ToolMode::Constrained, &params).unwrap()
        };
        // With log-probabilities the chunk returns whole rows; without, it scores only
        // the tokens the constraint allows at each position.
        let greedy = toolgate::sampling::SamplingParams::greedy;
        let (off, on, on_scored) =
            (run_with(false, Some(0), greedy()), run_with(true, Some(0), greedy()), run_with(true, None, greedy()));
        // Sampled: each draft position draws from the sampler as a decode step does, so
        // a seeded turn is the same turn.
        let sampled = toolgate::sampling::SamplingParams { temperature: 0.9, seed: 11, ..Default::default() };
        let (s_off, s_on) = (run_with(false, None, sampled.clone()), run_with(true, None, sampled));
        assert!(s_on.timings.forced_tokens > 0, "{name}");
        let args = |t: &toolgate::engine::chat::ChatTurn| {
            let calls: Vec<&str> = t.tool_calls.iter().map(|c| c.function.arguments.as_str()).collect();
            (calls.join("\n"), t.content.clone(), t.completion_tokens)
        };
        assert_eq!(args(&s_on), args(&s_off), "{name}: a seeded sampled turn changed");
        let tokens = |t: &toolgate::engine::chat::ChatTurn| t.logprobs.iter().map(|l| l.token).collect::<Vec<u32>>();
        assert!(on.timings.forced_tokens >= min_forced, "{name}: {:?}", on.timings);
        assert!(on.timings.forced_chunks >= 3 && on.timings.forced_chunks < on.timings.forced_tokens, "{name}");
        assert_eq!((off.timings.forced_chunks, off.timings.rejected_tokens), (0, 0), "{name}");
        assert_eq!(on_scored.timings.forced_tokens, on.timings.forced_tokens, "{name}");
        assert_eq!(tokens(&on), tokens(&off), "{name}: jump-forward changed the model's tokens");
        for t in [&on, &on_scored] {
            assert_eq!(t.tool_calls[0].function.arguments, off.tool_calls[0].function.arguments, "{name}");
            assert_eq!(t.completion_tokens, off.completion_tokens, "{name}");
        }
        for (a, b) in on.logprobs.iter().zip(&off.logprobs) {
            assert!((a.logprob - b.logprob).abs() < 0.05, "{name}: {a:?} vs {b:?}");
        }

        // Where the plain decode's tokens cross a forced run's end, and where they spell
        // forced text otherwise than the tokenizer does.
        let f = setup.layout.format.as_ref().unwrap();
        let spec = toolgate::tools::calls_grammar(f, &tools, &choice, false, engine.tokenizer()).unwrap();
        let mut m = Arc::new(spec.compile().unwrap()).matcher(engine.token_vocab());
        let (mut crossing, mut respelled) = (Vec::new(), Vec::new());
        let piece = |t: u32| engine.tokenizer().piece_bytes(t, false);
        for &t in &tokens(&off) {
            let forced = m.forced_bytes(256);
            let p = piece(t);
            if !forced.is_empty() && p.len() > forced.len() && p.starts_with(&forced) {
                crossing.push(String::from_utf8_lossy(&p).into_owned());
            }
            if let Ok(text) = std::str::from_utf8(&forced) {
                let own = engine.tokenizer().encode(text, toolgate::tokenizer::EncodeOptions::TEXT).unwrap();
                if forced.len() > p.len() && own.first().is_some_and(|&o| piece(o).len() > p.len()) {
                    respelled.push(String::from_utf8_lossy(&p).into_owned());
                }
            }
            if m.commit(t).is_err() {
                break;
            }
        }
        eprintln!("{name}: tokens crossing a forced run's end {crossing:?}, forced text respelled {respelled:?}");
        // A respelled piece is a draft token the model did not take.
        assert!(on.timings.rejected_tokens >= respelled.len().min(1), "{name}: {:?}", on.timings);
        match arch {
            "qwen2" => assert!(!crossing.is_empty(), "no token of {:?} crosses a forced run's end", off.content),
            _ => assert!(!respelled.is_empty(), "{:?} spells forced text as the tokenizer does", off.content),
        }
    }
}
