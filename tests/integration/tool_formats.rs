//! Every family format in `grammars/` against the calls its vendors' own templates
//! write: the family is detected from the template, the parser reads the calls Hugging
//! Face's renderer produced (`tests/fixtures/templates/expected-render.jsonl`, case
//! `tool_roundtrip`) at every split point in both reading modes, the constrained
//! grammar accepts that exact text, and SmolLM2 — given each family's template —
//! writes calls in that family's layout that parse and validate.

use crate::common;

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate::engine::chat::{prepare_turn, tool_turn, ChatTurn, ToolMode};
use toolgate::engine::prompt::TurnPrompt;
use toolgate::engine::{Engine, GenerateParams};
use toolgate::grammar::part::Built;
use toolgate::model::DeviceChoice;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{family, gate, ChatTemplate, ToolFallback};
use toolgate::tokenizer::Tokenizer;
use toolgate::tools::format::{self, ArgsDialect, ToolFormat};
use toolgate::tools::stream::{ParsedOutput, StreamParser};
use toolgate::tools::{calls_grammar, Tool, ToolChoice};

/// `(template file, family)`: every template in the corpus that renders tool calls in
/// a layout toolgate has a format file for.
const RENDERED: &[(&str, &str)] = &[
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
    ("Qwen-QwQ-32B.jinja", "hermes"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"),
    ("MiMo-VL.jinja", "hermes"),
    ("Bielik-11B-v3.0-Instruct.jinja", "hermes"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral-v11"),
    ("unsloth-mistral-Devstral-Small-2507.jinja", "mistral-v11"),
    ("meetkai-functionary-medium-v3.1.jinja", "functionary-v3.1"),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1"),
    ("moonshotai-Kimi-K2.jinja", "kimi-k2"),
    ("Apriel-1.6-15b-Thinker-fixed.jinja", "apriel"),
    ("google-gemma-4-31B-it.jinja", "gemma4"),
    ("Qwen3.5-4B.jinja", "qwen3-coder"),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "qwen3-coder"),
    ("StepFun3.5-Flash.jinja", "qwen3-coder"),
    ("ByteDance-Seed-OSS.jinja", "seed-oss"),
];

fn templates_dir() -> PathBuf {
    common::templates_dir()
}

/// The `tool_roundtrip` case of `template`: its input and Hugging Face's text.
fn roundtrip(template: &str) -> (Value, String) {
    let lines = common::fixture_text("templates/expected-render.jsonl");
    let row: Value = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["template"] == template && r["case"] == "tool_roundtrip")
        .unwrap_or_else(|| panic!("no tool_roundtrip case for {template}"));
    let out = row["output"].as_str().unwrap_or_else(|| panic!("{template}: {}", row["error"])).to_string();
    (row["input"].clone(), out)
}

/// What the model wrote in the rendered conversation: everything after the user's
/// question (the calls, then later turns, which hold no calls).
fn after_question(rendered: &str) -> &str {
    let q = "Weather in Paris, and 2+3?";
    &rendered[rendered.find(q).unwrap() + q.len()..]
}

fn parse(fmt: &ToolFormat, incremental: bool, pieces: &[&str]) -> ParsedOutput {
    let mut p = StreamParser::new(Some(fmt.clone()), incremental, 3);
    for piece in pieces {
        p.push(piece);
    }
    p.finish();
    p.into_output()
}

fn assert_roundtrip_calls(out: &ParsedOutput, what: &str) {
    assert_eq!(out.failures, 0, "{what}: {out:?}");
    let calls: Vec<(String, Value)> = out
        .calls
        .iter()
        .map(|c| (c.function.name.clone(), serde_json::from_str(&c.function.arguments).expect("arguments are JSON")))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("get_weather".to_string(), json!({"city": "Paris", "unit": "celsius"})),
            ("add".to_string(), json!({"a": 2, "b": 3}))
        ],
        "{what}"
    );
}

#[test]
fn every_family_reads_the_calls_its_templates_render_at_every_split() {
    for &(template, fam) in RENDERED {
        let src = std::fs::read_to_string(templates_dir().join(template)).unwrap();
        assert_eq!(family::detect(&ChatTemplate::new(template, src).unwrap()), fam, "{template}");
        let fmt = format::for_family(fam).unwrap().unwrap_or_else(|| panic!("no format file for {fam}"));
        let (_, rendered) = roundtrip(template);
        let text = after_question(&rendered);
        for incremental in [false, true] {
            let whole = parse(&fmt, incremental, &[text]);
            assert_roundtrip_calls(&whole, &format!("{template} incremental={incremental}"));
            let ids: std::collections::HashSet<_> = whole.calls.iter().map(|c| &c.id).collect();
            assert_eq!(ids.len(), 2, "call ids are distinct");
            let splits: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            for &i in &splits {
                let out = parse(&fmt, incremental, &[&text[..i], &text[i..]]);
                assert_eq!(out, whole, "{template} incremental={incremental} split at {i}");
            }
            let chars: Vec<&str> = splits.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            assert_eq!(parse(&fmt, incremental, &chars), whole, "{template} char by char");
        }
    }
}

/// Mistral Nemo's template refuses call ids that are not nine characters long: the
/// ids toolgate gives that family's calls render back.
#[test]
fn mistral_call_ids_render_back_through_the_template() {
    let fmt = format::for_family("mistral").unwrap().unwrap();
    let (input, rendered) = roundtrip("mistralai-Mistral-Nemo-Instruct-2407.jinja");
    let out = parse(&fmt, false, &[after_question(&rendered)]);
    let mut messages = vec![input["messages"][0].clone()];
    let calls: Vec<Value> = out.calls.iter().map(|c| serde_json::to_value(c).unwrap()).collect();
    assert!(out.calls.iter().all(|c| c.id.len() == 9 && c.id.bytes().all(|b| b.is_ascii_alphanumeric())));
    messages.push(json!({"role": "assistant", "content": "", "tool_calls": calls}));
    messages.push(json!({"role": "tool", "tool_call_id": out.calls[0].id, "content": "15"}));
    messages.push(json!({"role": "tool", "tool_call_id": out.calls[1].id, "content": "5"}));
    let src = std::fs::read_to_string(templates_dir().join("mistralai-Mistral-Nemo-Instruct-2407.jinja")).unwrap();
    let t = ChatTemplate::new("nemo", src).unwrap();
    let text = t.render(&toolgate::template::RenderRequest::new(messages)).unwrap();
    assert!(text.contains(&format!("\"id\": \"{}\"", out.calls[0].id)), "{text}");
}

/// The tools of the `tool_roundtrip` case, as OpenAI tools.
fn roundtrip_tools(input: &Value) -> Vec<Tool> {
    serde_json::from_value(input["tools"].clone()).unwrap()
}

fn smollm2_tokenizer() -> Tokenizer {
    let gguf = toolgate::gguf::GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

/// The bytes the constraint sees for `text`: Gemma's string quote is a control token,
/// which the grammar spells `0xFF<|"|>` (no vocabulary here has the other markers as
/// control tokens, so they stay text).
fn constraint_bytes(fmt: &ToolFormat, text: &str) -> Vec<u8> {
    match fmt.dialect {
        ArgsDialect::Json | ArgsDialect::XmlParameters | ArgsDialect::Python | ArgsDialect::PythonDict => {
            text.as_bytes().to_vec()
        }
        ArgsDialect::Gemma4 => {
            let quote = fmt.gemma_quote();
            text.replace(quote, &format!("\u{0}{quote}")).bytes().map(|b| if b == 0 { 0xFF } else { b }).collect()
        }
    }
}

#[test]
fn the_constraint_accepts_the_calls_each_template_renders() {
    let tok = smollm2_tokenizer();
    for &(template, fam) in RENDERED {
        let fmt = format::for_family(fam).unwrap().unwrap();
        let (input, rendered) = roundtrip(template);
        let text = after_question(&rendered);
        let tools = roundtrip_tools(&input);
        let spec = calls_grammar(&fmt, &tools, &ToolChoice::Required, true, &tok).unwrap();
        // The grammar compiles the steps it was built from; its text (which keys the
        // engine's cache) must spell the same language.
        let reread = Built::parse(&spec.main.text).unwrap_or_else(|e| panic!("{template}: {e}"));
        assert!(spec.main == reread, "{template}: the calls' text and steps differ");
        let grammar = spec.compile().unwrap_or_else(|e| panic!("{template}: {e}"));
        let start = text.find(fmt.trigger()).unwrap_or_else(|| panic!("{template}: no trigger in {text:?}"));
        let calls = &text[start..];
        // The longest prefix of the calls text the grammar accepts whole.
        let ends: Vec<usize> = (0..=calls.len()).filter(|&i| calls.is_char_boundary(i)).collect();
        let accepted = ends
            .iter()
            .rev()
            .find(|&&i| grammar.matches(&constraint_bytes(&fmt, &calls[..i])))
            .unwrap_or_else(|| panic!("{template}: the grammar accepts no prefix of {calls:?}"));
        // …and it holds both calls.
        assert_roundtrip_calls(&parse(&fmt, false, &[&calls[..*accepted]]), template);
        // One call only when parallel calls are off; a named tool excludes the other.
        let one = calls_grammar(&fmt, &tools, &ToolChoice::Required, false, &tok).unwrap().compile().unwrap();
        assert!(!one.matches(&constraint_bytes(&fmt, &calls[..*accepted])), "{template}");
        let named = calls_grammar(&fmt, &tools, &ToolChoice::Named("add".into()), true, &tok).unwrap();
        assert!(!named.compile().unwrap().matches(&constraint_bytes(&fmt, &calls[..*accepted])));
    }
}

/// Granite 3.x and Phi-4-mini / FireFunction templates in the corpus do not render an
/// assistant's calls back (Granite drops them, FireFunction's needs a `functions`
/// variable), so these two read the layout their templates' own instructions give:
/// "respond only with <|tool_call|> followed by a JSON list", "functools[{…}, …]".
#[test]
fn granite_and_functools_read_the_layout_their_templates_describe() {
    let cases = [
        ("granite", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}]<|end_of_text|>"),
        ("functools", " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}]"),
    ];
    let (input, _) = roundtrip("Qwen-Qwen2.5-7B-Instruct.jinja");
    let tools = roundtrip_tools(&input);
    let tok = smollm2_tokenizer();
    for (fam, text) in cases {
        let fmt = format::for_family(fam).unwrap().unwrap();
        for incremental in [false, true] {
            let out = parse(&fmt, incremental, &[text]);
            assert_roundtrip_calls(&out, fam);
            let splits: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            for &i in &splits {
                assert_eq!(parse(&fmt, incremental, &[&text[..i], &text[i..]]), out, "{fam} split at {i}");
            }
        }
        let grammar = calls_grammar(&fmt, &tools, &ToolChoice::Required, true, &tok).unwrap().compile().unwrap();
        let calls = &text[text.find(fmt.trigger()).unwrap()..text.rfind(']').unwrap() + 1];
        assert!(grammar.matches(calls.as_bytes()), "{fam}: {calls}");
    }
    // The word alone is text, not a call: the trigger is `functools[`.
    let fmt = format::for_family("functools").unwrap().unwrap();
    let out = parse(&fmt, false, &["Use functools.partial here."]);
    assert_eq!((out.content.as_str(), out.calls.len(), out.failures), ("Use functools.partial here.", 0, 0));
}

/// Malformed native output in sectioned formats stays visible and counts as a failure,
/// and the calls after it are still read.
#[test]
fn malformed_calls_in_sections_are_content_and_failures() {
    let v31 = format::for_family("deepseek-v3.1").unwrap().unwrap();
    let bad_then_good = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get weather now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let out = parse(&v31, false, &[bad_then_good]);
    assert_eq!(out.failures, 1, "{out:?}");
    assert_eq!(out.calls.len(), 1);
    assert_eq!(out.calls[0].function.name, "add");
    assert!(out.content.contains("get weather now"), "{out:?}");
    let nemo = format::for_family("mistral").unwrap().unwrap();
    let out = parse(&nemo, false, &["[TOOL_CALLS] I cannot call tools."]);
    assert_eq!((out.failures, out.calls.len()), (1, 0));
    assert_eq!(out.content, "[TOOL_CALLS] I cannot call tools.");
    // An unclosed object before the end marker: the call is malformed, not waiting forever.
    let hermes = format::for_family("hermes").unwrap().unwrap();
    let out = parse(&hermes, false, &["<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool_call> after"]);
    assert_eq!((out.failures, out.calls.len(), out.truncated), (1, 0, false));
    assert!(out.content.ends_with("</tool_call> after"), "{out:?}");
    // Gemma 4 arguments that are not Gemma syntax.
    let g4 = format::for_family("gemma4").unwrap().unwrap();
    let out = parse(&g4, false, &["<|tool_call>call:f{city:Paris}<tool_call|>"]);
    assert_eq!((out.failures, out.calls.len()), (1, 0));
}

/// SmolLM2 (49k vocabulary, no control tokens for these markers) given each family's
/// template, constrained: every call it writes is in that family's layout, parses, and
/// validates.
#[test]
fn smollm2_writes_valid_calls_in_every_family_layout_under_the_constraint() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let (input, _) = roundtrip("Qwen-Qwen2.5-7B-Instruct.jinja");
    let tools = roundtrip_tools(&input);
    let params = GenerateParams { max_tokens: 160, ..GenerateParams::default() };
    let mut seen = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    for &(template, fam) in RENDERED {
        if seen.contains(fam) {
            continue; // one template per family
        }
        let path = templates_dir().join(template);
        let setup = match gate("smollm2", &templates, Some("llama"), Some(&path), ToolFallback::None) {
            Ok(setup) => setup,
            // A template that never shows the model its tools fails the gate (as it
            // would for a real model of that family).
            Err(toolgate::Error::NotToolCapable(_)) => {
                refused.push(template);
                continue;
            }
            Err(e) => panic!("{template}: {e}"),
        };
        seen.insert(fam);
        assert_eq!(setup.family(), fam);
        let msgs = vec![json!({"role": "user", "content": "What is the weather in Paris? Also add 2 and 3."})];
        if format::for_family(fam).unwrap().unwrap().dialect == ArgsDialect::Gemma4 {
            // Gemma 4 quotes strings with a control token SmolLM2 does not have: a
            // clear refusal before generating, not a dead end halfway through a call.
            let err = tool_turn(
                &mut engine,
                &setup,
                msgs,
                &tools,
                &ToolChoice::Required,
                true,
                ToolMode::Constrained,
                &params,
            )
            .unwrap_err();
            assert!(err.to_string().contains("<|\"|> control token"), "{err}");
            continue;
        }
        // One generation per family (CI time), alternating `required` with parallel calls
        // and one named tool, so both run on several layouts.
        let (choice, parallel) =
            if seen.len() % 2 == 0 { (ToolChoice::Required, true) } else { (ToolChoice::Named("add".into()), false) };
        // No reasoning block left open by the prompt (Qwen 3.5's template opens one
        // unless `enable_thinking` is false): whether a 135M model closes one within the
        // budget depends on the kernels' rounding (on an AVX2-only EPYC it did not), not
        // on the layout under test. Reasoning before calls:
        // `sdk::sdks_on_a_reasoning_template`.
        let prompt =
            TurnPrompt { messages: msgs, vars: [("enable_thinking".to_string(), json!(false))].into_iter().collect() };
        let turn = prepare_turn(&mut engine, &setup, prompt, &tools, &choice, parallel, ToolMode::Constrained)
            .and_then(|p| p.run(&mut engine, &params, |_| {}))
            .unwrap_or_else(|e| panic!("{template}: {e}"));
        assert!(!turn.tool_calls.is_empty(), "{fam}: {turn:?}");
        assert_eq!(turn.parse_failures, 0, "{fam}: {turn:?}");
        // A list layout (`[{…}, {…}`) has no boundary between calls where the turn could
        // end, so a further call the budget cuts is dropped with `length`; the complete
        // calls before it stay.
        let want = if turn.cut_call { "length" } else { "tool_calls" };
        assert_eq!(turn.finish_reason, want, "{fam}: {turn:?}");
        for call in &turn.tool_calls {
            let args: Value = serde_json::from_str(&call.function.arguments)
                .unwrap_or_else(|e| panic!("{fam}: {e}: {:?}", call.function.arguments));
            let schema = &tools.iter().find(|t| t.function.name == call.function.name).unwrap().function.parameters;
            let v = jsonschema::validator_for(schema).unwrap();
            assert!(v.is_valid(&args), "{fam}: {call:?}");
        }
        if let ToolChoice::Named(n) = &choice {
            assert_eq!(turn.tool_calls.len(), 1, "{fam}");
            assert_eq!(&turn.tool_calls[0].function.name, n);
        }
    }
    let all: std::collections::BTreeSet<&str> = RENDERED.iter().map(|(_, f)| *f).collect();
    let missing: Vec<_> = all.difference(&seen).collect();
    // The DeepSeek V3.1 and R1-distill templates never render the tool list (llama.cpp
    // reports supports_tools=false for them too); every other family runs on real weights.
    assert_eq!(missing, [&"deepseek-r1", &"deepseek-v3.1"], "refused: {refused:?}");
}

/// Gemma 3 270M given FunctionGemma's control tokens and a FunctionGemma-style
/// template of ours (`scripts/fetch-models gemma3-fg`): the layout comes from its own
/// template (strings quoted with `<escape>`), a constrained call writes that quote as
/// the vocabulary's one control token, and reads back as JSON arguments that validate.
/// The model was never trained on these tokens: the constraint alone writes them.
#[test]
fn a_derived_quote_token_is_generated_as_the_vocabularys_control_token() {
    let mut engine = Engine::load(common::model(common::GEMMA3_FG), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let setup = gate("gemma3-fg", &templates, Some("gemma3"), None, ToolFallback::None).unwrap();
    let f = setup.layout.format.clone().unwrap();
    assert_eq!((f.dialect, f.gemma_quote()), (ArgsDialect::Gemma4, "<escape>"));
    let turn = one_weather_call(&mut engine, &setup, 64);
    // The city's two quotes, each the one `<escape>` token.
    let escape = engine.tokenizer().token_id("<escape>").unwrap();
    assert_eq!(turn.logprobs.iter().filter(|l| l.token == escape).count(), 2, "{:?}", turn.logprobs);
}

/// Gemma 3 270M with FunctionGemma's control tokens and a template that prints every
/// argument between `<escape>` tokens (`templates/printed-values.jinja`, a look-alike
/// of vLLM's FunctionGemma example): the layout admits a number either bare or
/// quoted, and a constrained call on real weights reads back as arguments that
/// validate, its quotes each the one `<escape>` token.
#[test]
fn values_printed_between_quote_tokens_read_back_on_real_weights() {
    let (mut engine, setup) = with_fixture_template(common::GEMMA3_FG, "printed-values", "gemma3");
    let f = setup.layout.format.clone().unwrap();
    assert_eq!((f.dialect, f.gemma_quote(), f.python_quirks.quoted_scalars), (ArgsDialect::Gemma4, "<escape>", true));
    let turn = one_weather_call(&mut engine, &setup, 64);
    let escape = engine.tokenizer().token_id("<escape>").unwrap();
    let quotes = turn.logprobs.iter().filter(|l| l.token == escape).count();
    // The city's two, and two more if the model quoted the number.
    assert!(quotes == 2 || quotes == 4, "{quotes} quotes: {:?}", turn.logprobs);
}

/// Qwen2.5-Coder 0.5B with a template that prints a call's arguments as Python's
/// `repr` of a dict inside a JSON body (`templates/printed-mapping.jinja`, a
/// look-alike of vLLM's Phi-4-mini example): a constrained call reads back as
/// arguments that validate, in whichever of the two spellings the model chose.
#[test]
fn arguments_printed_as_a_python_dict_read_back_on_real_weights() {
    let (mut engine, setup) = with_fixture_template(common::QWEN_CODER, "printed-mapping", "qwen2");
    let f = setup.layout.format.clone().unwrap();
    assert_eq!((f.dialect, f.section_start.as_str()), (ArgsDialect::PythonDict, "[calls]"));
    one_weather_call(&mut engine, &setup, 64);
}

/// A vendor token before every tag (MiniMax M3's layout, on Gemma 3 270M's real
/// weights with `templates/vendor-token-tags.jinja`, a look-alike of ours whose token
/// is Gemma 3's `<unused9>` control token): a constrained call writes each of the
/// tags' tokens as the vocabulary's one control token, never as text, and reads back
/// as arguments that validate, each closed by its own key's tag.
#[test]
fn a_vendor_token_before_every_tag_is_generated_as_the_control_token() {
    let (mut engine, setup) = with_fixture_template(common::GEMMA3, "vendor-token-tags", "gemma3");
    let f = setup.layout.format.clone().unwrap();
    assert_eq!(f.dialect, ArgsDialect::XmlParameters);
    let turn = one_weather_call(&mut engine, &setup, 128);
    // `<calls>`, `<call …>`, two parameters' two tags, `</call>`, `</calls>`: each
    // after the one `<unused9>` token.
    let token = engine.tokenizer().token_id("<unused9>").unwrap();
    assert_eq!(turn.logprobs.iter().filter(|l| l.token == token).count(), 8, "{:?}", turn.logprobs);
}

/// `model` loaded on the CPU, and its setup under `tests/fixtures/templates/NAME.jinja`
/// (a template of ours) in place of its own, the architecture `arch` as its GGUF says.
fn with_fixture_template(model: &str, name: &str, arch: &str) -> (Engine, toolgate::template::ChatSetup) {
    let engine = Engine::load(common::model(model), DeviceChoice::Cpu).unwrap();
    let source = common::fixture_text(&format!("templates/{name}.jinja"));
    let templates = GgufTemplates { default: Some(source), tool_use: None };
    (engine, gate(name, &templates, Some(arch), None, ToolFallback::None).unwrap())
}

/// A constrained `required` turn with one `get_weather` tool (an enum city, bounded
/// days) and logprobs, checked to end in one call whose arguments validate.
fn one_weather_call(engine: &mut Engine, setup: &toolgate::template::ChatSetup, max_tokens: usize) -> ChatTurn {
    let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["city", "days"]}}}]))
    .unwrap();
    let msgs = vec![json!({"role": "user", "content": "What is the weather in Paris for 3 days?"})];
    let params = GenerateParams { max_tokens, logprobs: Some(0), ..GenerateParams::default() };
    let turn =
        tool_turn(engine, setup, msgs, &tools, &ToolChoice::Required, false, ToolMode::Constrained, &params).unwrap();
    let ids: Vec<u32> = turn.logprobs.iter().map(|l| l.token).collect();
    let text = engine.tokenizer().decode(&ids, false);
    assert_eq!((turn.finish_reason, turn.parse_failures, turn.tool_calls.len()), ("tool_calls", 0, 1), "{text:?}");
    let args: Value = serde_json::from_str(&turn.tool_calls[0].function.arguments).unwrap();
    let v = jsonschema::validator_for(&tools[0].function.parameters).unwrap();
    assert!(v.is_valid(&args), "{args}");
    turn
}

/// `--tool-format` picks any family that has a format file; an unknown one is an error
/// listing them. Every format file's family is one detection can report.
#[test]
fn the_format_can_be_chosen_by_name() {
    let generic = gate("m", &GgufTemplates::default(), None, None, ToolFallback::Generic).unwrap();
    for f in format::all().unwrap() {
        let setup = generic.clone().with_family(&f.family).unwrap_or_else(|e| panic!("{}: {e}", f.family));
        assert_eq!(setup.family(), f.family);
    }
    let err = generic.with_family("nope").unwrap_err().to_string();
    assert!(err.contains("nope") && err.contains("mistral-v11"), "{err}");
    // `--help` names every format the flag accepts.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    for f in format::all().unwrap() {
        assert!(help.contains(&f.family), "`toolgate serve --help` does not name {}", f.family);
    }
}

/// Llama 3.x writes a bare `{"name": …, "parameters": …}` with no marker (and its
/// templates refuse two calls in one turn, so the shared round trip has none): our
/// renderer gives the one-call turn, which the parser, the grammar and SmolLM2 under
/// the Llama 3.1 template all agree on.
#[test]
fn llama3_bare_json_calls() {
    let fmt = format::for_family("llama3-json").unwrap().unwrap();
    let (input, _) = roundtrip("Qwen-Qwen2.5-7B-Instruct.jinja");
    let tools = roundtrip_tools(&input);
    let call = json!({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}});
    let tok = smollm2_tokenizer();
    for template in ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"] {
        let t = ChatTemplate::new(template, std::fs::read_to_string(templates_dir().join(template)).unwrap()).unwrap();
        assert_eq!(family::detect(&t), "llama3-json");
        let mut req = toolgate::template::RenderRequest::new(vec![
            json!({"role": "user", "content": "Weather in Paris, and 2+3?"}),
            json!({"role": "assistant", "content": "", "tool_calls": [call]}),
        ]);
        req.tools = Some(input["tools"].as_array().unwrap().clone());
        req.add_generation_prompt = false;
        let rendered = t.render(&req).unwrap();
        let text = after_question(&rendered);
        for incremental in [false, true] {
            let whole = parse(&fmt, incremental, &[text]);
            assert_eq!(whole.failures, 0);
            assert_eq!(whole.calls.len(), 1, "{template}: {text:?}");
            assert_eq!(whole.calls[0].function.name, "get_weather");
            let args: Value = serde_json::from_str(&whole.calls[0].function.arguments).unwrap();
            assert_eq!(args, json!({"city": "Paris", "unit": "celsius"}));
            for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                assert_eq!(parse(&fmt, incremental, &[&text[..i], &text[i..]]), whole, "split at {i}");
            }
        }
        let g = calls_grammar(&fmt, &tools, &ToolChoice::Required, false, &tok).unwrap().compile().unwrap();
        let start = text.find("{\"name\"").unwrap();
        let end = text[start..].find("}}").unwrap() + start + 2;
        assert!(g.matches(&text.as_bytes()[start..end]), "{:?}", &text[start..end]);
    }
    // With the `<|python_tag|>` prefix some Llama 3.x builds put before a call (no
    // template in the corpus renders it for custom tools): the same object after it.
    let tagged = format::for_family("llama3-python-tag").unwrap().unwrap();
    let text = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}<|eom_id|>";
    for incremental in [false, true] {
        let whole = parse(&tagged, incremental, &[text]);
        assert_eq!((whole.calls.len(), whole.failures), (1, 0), "{whole:?}");
        assert_eq!(whole.calls[0].function.arguments, r#"{"city": "Paris", "unit": "celsius"}"#);
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(parse(&tagged, incremental, &[&text[..i], &text[i..]]), whole, "split at {i}");
        }
    }
    let g = calls_grammar(&tagged, &tools, &ToolChoice::Required, false, &tok).unwrap().compile().unwrap();
    assert!(g.matches(&text.as_bytes()[..text.find("<|eom_id|>").unwrap()]));
    // Text that merely starts like a call stays text; so does an unfinished object.
    for text in ["Use {\"name\": 1} as the key.", "Set {\"name\" to something"] {
        let out = parse(&fmt, false, &[text]);
        assert_eq!((out.content.as_str(), out.calls.len()), (text, 0), "{out:?}");
    }

    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let path = templates_dir().join("meta-llama-Llama-3.1-8B-Instruct.jinja");
    let setup = gate("smollm2", &templates, Some("llama"), Some(&path), ToolFallback::None).unwrap();
    assert_eq!(setup.family(), "llama3-json");
    let params = GenerateParams { max_tokens: 48, ..GenerateParams::default() };
    let msgs = vec![json!({"role": "user", "content": "What is the weather in Paris?"})];
    for choice in [ToolChoice::Required, ToolChoice::Named("add".into())] {
        let turn = tool_turn(&mut engine, &setup, msgs.clone(), &tools, &choice, false, ToolMode::Constrained, &params)
            .unwrap();
        assert_eq!((turn.tool_calls.len(), turn.parse_failures), (1, 0), "{turn:?}");
        let call = &turn.tool_calls[0];
        let schema = &tools.iter().find(|t| t.function.name == call.function.name).unwrap().function.parameters;
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
        assert!(jsonschema::validator_for(schema).unwrap().is_valid(&args), "{call:?}");
    }
}

/// XML-style parameters carry no quotes: the declared types decide that a string
/// parameter that looks like a number stays a string, while an integer becomes one.
#[test]
fn xml_parameters_follow_the_declared_types() {
    let fmt = format::for_family("qwen3-coder").unwrap().unwrap();
    let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "ship",
        "parameters": {"type": "object", "properties": {"zip": {"type": "string"}, "count": {"type": "integer"},
        "note": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}}}}]))
    .unwrap();
    let text = "<tool_call>\n<function=ship>\n<parameter=zip>\n75001\n</parameter>\n<parameter=count>\n3\n</parameter>\n\
                <parameter=note>\na < b and </param> inside\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n\
                </function>\n</tool_call>";
    for incremental in [false, true] {
        let mut p = StreamParser::new(Some(fmt.clone()), incremental, 1).with_tools(&tools);
        p.push(text);
        p.finish();
        let out = p.into_output();
        assert_eq!(out.failures, 0, "{out:?}");
        let args: Value = serde_json::from_str(&out.calls[0].function.arguments).unwrap();
        assert_eq!(args, json!({"zip": "75001", "count": 3, "note": "a < b and </param> inside", "tags": ["x", "y"]}));
    }
    let tok = smollm2_tokenizer();
    let g = calls_grammar(&fmt, &tools, &ToolChoice::Required, false, &tok).unwrap().compile().unwrap();
    assert!(g.matches(text.as_bytes()));
    assert!(!g.matches(text.replace("\n3\n", "\nthree\n").as_bytes()), "an integer parameter is JSON");
}

/// Tool arguments compile as `response_format` schemas do (shared rules, automata): a
/// pattern under a length bound and `multipleOf` hold exactly in the JSON, XML and
/// pythonic argument layouts.
#[test]
fn tool_arguments_hold_patterns_with_lengths_and_multiples() {
    let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "ship",
        "strict": true, "parameters": {"type": "object", "properties": {
            "zip": {"type": "string", "pattern": "^[0-9]+$", "maxLength": 5},
            "qty": {"type": "number", "multipleOf": 0.5}}, "required": ["zip", "qty"]}}}]))
    .unwrap();
    let tok = smollm2_tokenizer();
    let layouts = [
        ("hermes", "<tool_call>\n{\"name\": \"ship\", \"arguments\": {\"zip\": \"ZIP\", \"qty\": QTY}}\n</tool_call>"),
        (
            "qwen3-coder",
            "<tool_call>\n<function=ship>\n<parameter=zip>\nZIP\n</parameter>\n<parameter=qty>\nQTY\n</parameter>\n</function>\n</tool_call>",
        ),
        ("pythonic", "<|tool_call_start|>[ship(zip=\"ZIP\", qty=QTY)]<|tool_call_end|>"),
    ];
    for (fam, layout) in layouts {
        let fmt = format::for_family(fam).unwrap().unwrap();
        let g = calls_grammar(&fmt, &tools, &ToolChoice::Required, false, &tok).unwrap().compile().unwrap();
        let call = |zip: &str, qty: &str| constraint_bytes(&fmt, &layout.replace("ZIP", zip).replace("QTY", qty));
        for (zip, qty) in [("75001", "2.5"), ("7", "3"), ("00000", "-0.5"), ("1", "100.0")] {
            assert!(g.matches(&call(zip, qty)), "{fam}: {zip} {qty}");
        }
        for (zip, qty, why) in [
            ("750011", "2.5", "six characters"),
            ("7500a", "2.5", "not the pattern"),
            ("", "2.5", "the pattern needs a digit"),
            ("75001", "2.25", "not a multiple of 0.5"),
            ("75001", "1.1", "not a multiple of 0.5"),
        ] {
            assert!(!g.matches(&call(zip, qty)), "{fam}: {why}");
        }
    }
}

/// LFM2's pythonic calls: its template renders no calls (the assistant's text is kept
/// as written), so the layout comes from the model card and llama.cpp's parser:
/// `<|tool_call_start|>[f(a=1), g(b="x")]<|tool_call_end|>`. Read at every split in both
/// modes, accepted by the grammar, and written by SmolLM2 with `--tool-format pythonic`.
#[test]
fn pythonic_calls() {
    let fmt = format::for_family("pythonic").unwrap().unwrap();
    let text =
        "Sure. <|tool_call_start|>[get_weather(city='Paris', unit=\"celsius\"), add(a=2, b=3)]<|tool_call_end|> Done.";
    for incremental in [false, true] {
        let whole = parse(&fmt, incremental, &[text]);
        assert_roundtrip_calls(&whole, "pythonic");
        assert_eq!(whole.content, "Sure.  Done.");
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(parse(&fmt, incremental, &[&text[..i], &text[i..]]), whole, "split at {i}");
        }
    }
    let (input, _) = roundtrip("Qwen-Qwen2.5-7B-Instruct.jinja");
    let tools = roundtrip_tools(&input);
    let tok = smollm2_tokenizer();
    let g = calls_grammar(&fmt, &tools, &ToolChoice::Required, true, &tok).unwrap().compile().unwrap();
    let canonical =
        "<|tool_call_start|>[get_weather(city=\"Paris\", unit=\"celsius\"), add(a=2, b=3)]<|tool_call_end|>";
    assert!(g.matches(canonical.as_bytes()));
    assert!(!g.matches(canonical.replace("a=2", "a=\"2\"").as_bytes()), "an integer is not a string");

    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    // LFM2's template never renders an assistant's calls, so the gate refuses it (as
    // llama.cpp's prober does): SmolLM2 runs on the generic template, and the format
    // is chosen by name — the grammar and parser on a real vocabulary and real weights.
    let path = templates_dir().join("LFM2-8B-A1B.jinja");
    assert!(gate("smollm2", &templates, Some("llama"), Some(&path), ToolFallback::None).is_err());
    let setup = gate("smollm2", &templates, Some("llama"), Some(&path), ToolFallback::Generic)
        .unwrap()
        .with_family("pythonic")
        .unwrap();
    let params = GenerateParams { max_tokens: 64, ..GenerateParams::default() };
    let msgs = vec![json!({"role": "user", "content": "What is the weather in Paris? Also add 2 and 3."})];
    for (choice, parallel) in [(ToolChoice::Required, true), (ToolChoice::Named("add".into()), false)] {
        let turn =
            tool_turn(&mut engine, &setup, msgs.clone(), &tools, &choice, parallel, ToolMode::Constrained, &params)
                .unwrap();
        assert!(!turn.tool_calls.is_empty() && turn.parse_failures == 0, "{turn:?}");
        assert_eq!(turn.finish_reason, "tool_calls", "{turn:?}");
        for call in &turn.tool_calls {
            let schema = &tools.iter().find(|t| t.function.name == call.function.name).unwrap().function.parameters;
            let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
            assert!(jsonschema::validator_for(schema).unwrap().is_valid(&args), "{call:?}");
        }
    }
}
