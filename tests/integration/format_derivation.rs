//! Tool-call layouts derived from the templates themselves (`tools::derive`): every
//! tool-capable template of the test corpus (`common::corpus`) gets a layout that round-trips the
//! calls it renders (one call, and two where it renders parallel calls), through the
//! same setup `serve` builds; templates that render no calls are named, with the
//! override they get.

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate::template::source::GgufTemplates;
use toolgate::template::{inspect, ChatTemplate};
use toolgate::tools::conformance::{conformance, probe_tools};
use toolgate::tools::derive::derive;
use toolgate::tools::format::ToolFormat;
use toolgate::tools::layout::Origin;
use toolgate::tools::stream::StreamParser;
use toolgate::tools::{calls_grammar_plain, Tool, ToolChoice};

fn templates_dir() -> PathBuf {
    crate::common::templates_dir()
}

fn corpus() -> Vec<(String, String)> {
    crate::common::corpus()
}

/// Tool-capable templates of the corpus whose calls toolgate cannot read yet, and the
/// reason the round trip must name (none left).
const KNOWN_GAPS: &[(&str, &str)] = &[];

#[test]
fn every_tool_capable_template_gets_a_layout_that_round_trips() {
    let mut table = Vec::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, source) in corpus() {
        let templates = GgufTemplates { default: Some(source), tool_use: None };
        let setup = inspect(&templates, None, None).unwrap();
        if !setup.report.caps.tool_capable() {
            table.push(format!("{name:60} not tool-capable"));
            continue;
        }
        let l = &setup.layout;
        table.push(format!("{name:60} {:18} {:9?} parallel={} {}", l.family, l.origin, l.parallel, l.round_trip));
        if std::env::var_os("TOOLGATE_SHOW_SAMPLES").is_some() {
            table.push(format!("    sample: {:?}", l.sample));
            let d = derive(&setup.template, setup.report.caps.supports_object_arguments);
            table.push(format!("    derived: {:?}", d.map(|d| d.format)));
        }
        let ok = match KNOWN_GAPS.iter().find(|(n, _)| *n == name) {
            Some((_, why)) => l.origin == Origin::None && l.format.is_none() && l.round_trip.contains(why),
            None => matches!(l.origin, Origin::Derived | Origin::Override) && l.round_trip == "passed",
        };
        checked += usize::from(ok);
        if !ok {
            failures.push(format!("{name}: {} {:?}: {}", l.family, l.origin, l.round_trip));
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{} templates not as expected:\n{}", failures.len(), failures.join("\n"));
    assert!(checked >= 29, "only {checked} tool-capable templates checked");
}

/// Parse `text` with `f` whole and incrementally, at every split point: the calls
/// read (name, arguments as JSON) must be the same every way.
fn read_every_way(f: &ToolFormat, tools: &[Tool], text: &str) -> Vec<(String, Value)> {
    let read = |incremental: bool, pieces: &[&str]| {
        let mut p = StreamParser::new(Some(f.clone()), incremental, 7).with_tools(tools);
        for piece in pieces {
            p.push(piece);
        }
        p.finish();
        let out = p.into_output();
        assert_eq!(out.failures, 0, "{out:?}");
        out.calls
            .iter()
            .map(|c| (c.function.name.clone(), serde_json::from_str(&c.function.arguments).unwrap()))
            .collect::<Vec<(String, Value)>>()
    };
    let whole = read(false, &[text]);
    for incremental in [false, true] {
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(read(incremental, &[&text[..i], &text[i..]]), whole, "split at {i}, incremental={incremental}");
        }
    }
    whole
}

fn weather_tool() -> Vec<Tool> {
    vec![serde_json::from_value(json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
        "metric": {"type": "boolean"}}, "required": ["city", "days"]}}}))
    .unwrap()]
}

fn template(name: &str) -> ChatTemplate {
    ChatTemplate::new(name, std::fs::read_to_string(templates_dir().join(name)).unwrap()).unwrap()
}

#[test]
fn glm_calls_are_tagged_parameters_typed_by_the_schema() {
    // GLM writes <tool_call>NAME then <arg_key>/<arg_value> pairs, which the hermes
    // override (its `<tool_call>` marker) does not read: the derived layout is used.
    let d = derive(&template("GLM-4.6.jinja"), true).unwrap();
    let f = &d.format;
    let tags = f.params.as_ref().expect("tagged parameters");
    assert_eq!((f.call_start.as_str(), f.call_end.as_str()), ("<tool_call>", "</tool_call>"));
    assert_eq!(
        (tags.key_start.as_str(), tags.key_end.as_str(), tags.value_end.as_str()),
        ("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>")
    );
    assert!(d.parallel);
    let tools = weather_tool();
    // A string that looks like a number stays a string; integers and booleans are typed.
    let text = "I'll check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>1984</arg_value>\n\
                <arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n</tool_call>";
    assert_eq!(
        read_every_way(f, &tools, text),
        vec![("get_weather".into(), json!({"city": "1984", "days": 3, "metric": true}))]
    );
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    let calls = &text["I'll check.".len()..];
    assert!(g.matches(calls.as_bytes()));
    assert!(!g.matches(calls.replace("<arg_value>3<", "<arg_value>three<").as_bytes()));
    // GLM 4.7 writes the same without newlines.
    let f47 = derive(&template("GLM-4.7-Flash.jinja"), true).unwrap().format;
    let flat = text.replace('\n', "");
    assert_eq!(
        read_every_way(&f47, &tools, &flat),
        vec![("get_weather".into(), json!({"city": "1984", "days": 3, "metric": true}))]
    );
}

/// Qwen3-Coder's and MiniCPM5's templates print a boolean argument with Jinja's
/// `{{ value }}` (`True`, as HF's jinja2 renders them — the texts below), and a null one
/// as `None`: the calls read back with a JSON boolean or null and the constrained
/// grammar accepts that very text.
#[test]
fn tagged_layouts_read_and_admit_the_python_booleans_and_none_their_templates_render() {
    let tools = weather_tool();
    let cases = [
        (
            "Qwen3-Coder.jinja",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n\
             </parameter>\n<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>",
        ),
        (
            "openbmb-MiniCPM5-1B.jinja",
            "<function name=\"get_weather\"><param name=\"city\">Oslo</param><param name=\"days\">3</param>\
             <param name=\"metric\">True</param></function>",
        ),
    ];
    for (name, text) in cases {
        let f = derive(&template(name), true).unwrap().format;
        let want = vec![("get_weather".to_string(), json!({"city": "Oslo", "days": 3, "metric": true}))];
        assert_eq!(read_every_way(&f, &tools, text), want, "{name}");
        let g = calls_grammar_plain(&f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
        assert!(g.matches(text.as_bytes()), "{name}: {text}");
        assert!(g.matches(text.replace("True", "false").as_bytes()), "{name}");
        assert!(!g.matches(text.replace("True", "Yes").as_bytes()), "{name}");
        // A string parameter keeps the text `True`.
        let as_city = text.replace(">Oslo<", ">True<").replace(">\nOslo\n<", ">\nTrue\n<");
        assert_eq!(read_every_way(&f, &tools, &as_city)[0].1["city"], "True", "{name}");
        // A null argument, which both print as `None` (jinja2's render of
        // `{"city": "Oslo", "days": null}` for a `days` of type integer or null), reads
        // back as null and is admitted; a string parameter keeps the text `None`.
        let nullable: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {
            "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": ["integer", "null"]}}, "required": ["city"]}}}]))
        .unwrap();
        let none = match name {
            "Qwen3-Coder.jinja" => {
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\nNone\n\
                 </parameter>\n</function>\n</tool_call>"
            }
            _ => "<function name=\"get_weather\"><param name=\"city\">Oslo</param><param name=\"days\">None</param></function>",
        };
        let want = vec![("get_weather".to_string(), json!({"city": "Oslo", "days": null}))];
        assert_eq!(read_every_way(&f, &nullable, none), want, "{name}");
        let g = calls_grammar_plain(&f, &nullable, &ToolChoice::Required, true).unwrap().compile().unwrap();
        assert!(g.matches(none.as_bytes()), "{name}: {none}");
        assert!(g.matches(none.replace("None", "null").as_bytes()), "{name}");
        assert!(!g.matches(none.replace("None", "Nil").as_bytes()), "{name}");
        let as_city = none.replace("Oslo", "None");
        assert_eq!(read_every_way(&f, &nullable, &as_city)[0].1["city"], "None", "{name}");
    }
}

/// A MiniMax-M2-style template, written for this test from the layout MiniMax
/// documents: `<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>…</invoke></minimax:tool_call>`.
const MINIMAX_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.role == 'assistant' -%}]~b]ai
{% if m.content %}{{ m.content }}{% endif -%}
{%- if m.tool_calls -%}
<minimax:tool_call>
{% for c in m.tool_calls -%}
<invoke name="{{ c.function.name }}">
{% for k, v in c.function.arguments.items() -%}
<parameter name="{{ k }}">{{ v if v is string else v | tojson }}</parameter>
{% endfor -%}
</invoke>
{% endfor -%}
</minimax:tool_call>
{%- endif -%}[e~[
{% else -%}]~b]{{ m.role }}
{{ m.content }}[e~[
{% endif -%}
{%- endfor -%}
{%- if tools -%}]~b]system
{{ tools | tojson }}[e~[
{% endif -%}
{%- if add_generation_prompt -%}]~b]ai
{% endif -%}"#;

/// A DeepSeek-V3.2-DSML-style template, written for this test: parameters say in
/// their tag whether the value is a bare string (`string="true"`) or JSON.
const DSML_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.role == 'assistant' -%}<｜Assistant｜>{{ m.content or '' }}
{%- if m.tool_calls -%}
<｜DSML｜function_calls>
{% for c in m.tool_calls -%}
<｜DSML｜invoke name="{{ c.function.name }}">
{% for k, v in c.function.arguments.items() -%}
<｜DSML｜parameter name="{{ k }}" string="{{ 'true' if v is string else 'false' }}">{{ v if v is string else v | tojson }}</｜DSML｜parameter>
{% endfor -%}
</｜DSML｜invoke>
{% endfor -%}
</｜DSML｜function_calls>
{%- endif -%}<｜end▁of▁sentence｜>
{%- else -%}<｜{{ m.role }}｜>{{ m.content }}
{%- endif -%}
{%- endfor -%}
{%- if tools %}{{ tools | tojson }}{% endif -%}
{%- if add_generation_prompt -%}<｜Assistant｜>{%- endif -%}"#;

#[test]
fn invoke_and_typed_parameter_layouts_are_derived() {
    let tools = weather_tool();
    let minimax = derive(&ChatTemplate::new("minimax-style", MINIMAX_STYLE).unwrap(), true).unwrap();
    let f = &minimax.format;
    // One section holds the calls; each call opens with its invoke tag.
    assert_eq!(
        (f.section_start.as_str(), f.call_start.as_str(), f.name_end.as_str(), f.call_end.as_str()),
        ("<minimax:tool_call>", "<invoke name=\"", "\">", "</invoke>")
    );
    let text = "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo</parameter>\n\
                <parameter name=\"days\">2</parameter>\n</invoke>\n</minimax:tool_call>";
    assert_eq!(read_every_way(f, &tools, text), vec![("get_weather".into(), json!({"city": "Oslo", "days": 2}))]);

    let dsml = derive(&ChatTemplate::new("dsml-style", DSML_STYLE).unwrap(), true).unwrap();
    let f = &dsml.format;
    let tags = f.params.as_ref().unwrap();
    assert_eq!(
        (tags.key_end.as_str(), tags.key_end_json.as_deref()),
        ("\" string=\"true\">", Some("\" string=\"false\">"))
    );
    let text = "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n\
                <｜DSML｜parameter name=\"city\" string=\"true\">42</｜DSML｜parameter>\n\
                <｜DSML｜parameter name=\"days\" string=\"false\">5</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
    assert_eq!(read_every_way(f, &tools, text), vec![("get_weather".into(), json!({"city": "42", "days": 5}))]);
    // The grammar types the tag: a number may not claim to be a string.
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(text.as_bytes()));
    assert!(!g.matches(text.replace("\"days\" string=\"false\"", "\"days\" string=\"true\"").as_bytes()));
}

#[test]
fn an_underivable_template_says_what_is_missing() {
    // Calls rendered with no marker around them cannot be told from text.
    let t = ChatTemplate::new(
        "bare",
        "{%- for m in messages -%}<|{{ m.role }}|>{%- if m.tool_calls -%}\
        {%- for c in m.tool_calls -%}{{ c.function.name }} {{ c.function.arguments | tojson }}{%- endfor -%}\
        {%- else -%}{{ m.content }}{%- endif -%}<|end|>{%- endfor -%}",
    )
    .unwrap();
    let err = derive(&t, true).unwrap_err();
    assert!(err.to_string().contains("no marker to recognise them by"), "{err}");
    // A template that never renders calls has no sample: nothing to check an override against.
    let t = ChatTemplate::new("plain", "{%- for m in messages -%}{{ m.content }}{%- endfor -%}").unwrap();
    let err = derive(&t, true).unwrap_err();
    assert!(err.sample.is_none() && err.to_string().contains("without the call"), "{err}");
}

#[test]
fn derived_layouts_round_trip_their_own_samples() {
    for (name, source) in corpus() {
        let t = ChatTemplate::new(&name, source).unwrap();
        let Ok(d) = derive(&t, true) else { continue };
        conformance(&d.format, &d.sample, d.parallel).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn smollm2_writes_valid_calls_in_derived_layouts_under_the_constraint() {
    use toolgate::engine::chat::{tool_turn, ToolMode};
    use toolgate::engine::{Engine, GenerateParams};
    use toolgate::model::DeviceChoice;
    use toolgate::template::{gate, ToolFallback};
    let mut engine = Engine::load(crate::common::model(crate::common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    // Descriptions everywhere: Apertus's template prints them and fails without.
    let tools: Vec<Tool> = serde_json::from_value(json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit."}},
            "required": ["city", "unit"]}}},
        {"type": "function", "function": {"name": "add", "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "description": "First."}, "b": {"type": "integer", "description": "Second."}},
            "required": ["a", "b"]}}}
    ]))
    .unwrap();
    let params = GenerateParams { max_tokens: 80, ..GenerateParams::default() };
    let msgs = vec![json!({"role": "user", "content": "What is the weather in Paris? Also add 2 and 3."})];
    let vllm = crate::common::vllm_templates_dir();
    for path in [
        templates_dir().join("GLM-4.6.jinja"),
        templates_dir().join("GLM-4.7-Flash.jinja"),
        templates_dir().join("Apertus-8B-Instruct.jinja"),
        templates_dir().join("GigaChat3-10B-A1.8B.jinja"),
        templates_dir().join("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"),
        // Not Command R+: SmolLM2 keeps adding calls to its list until the budget cuts
        // the list, so no call is returned (a cut call is dropped). Open.
        // Bare strings admitted beside Python's (`python_quirks`).
        vllm.join("tool_chat_template_llama3.2_pythonic.jinja"),
        // Quoted numbers admitted beside Python's.
        vllm.join("tool_chat_template_llama4_pythonic.jinja"),
        // The generation prompt ends with the call marker `>>>`: the grammar starts
        // after it.
        templates_dir().join("meetkai-functionary-medium-v3.2.jinja"),
    ] {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let setup = gate("smollm2", &templates, Some("llama"), Some(&path), ToolFallback::None).unwrap();
        assert_eq!((setup.layout.origin, setup.family()), (Origin::Derived, "derived"), "{name}");
        let parallel = setup.layout.parallel;
        let turn = tool_turn(
            &mut engine,
            &setup,
            msgs.clone(),
            &tools,
            &ToolChoice::Required,
            parallel,
            ToolMode::Constrained,
            &params,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("{name}: {:?}", turn.tool_calls);
        assert!(!turn.tool_calls.is_empty() && turn.parse_failures == 0, "{name}: {turn:?}");
        // A list the budget cut keeps its complete calls and says `length`.
        let want = if turn.cut_call { "length" } else { "tool_calls" };
        assert_eq!(turn.finish_reason, want, "{name}: {turn:?}");
        for call in &turn.tool_calls {
            let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
            let schema = &tools.iter().find(|t| t.function.name == call.function.name).unwrap().function.parameters;
            assert!(jsonschema::validator_for(schema).unwrap().is_valid(&args), "{name}: {call:?}");
        }
    }
}

#[test]
fn command_r7b_calls_lead_with_their_index_in_a_pretty_printed_list() {
    let d = derive(&template("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"), true).unwrap();
    let f = &d.format;
    assert_eq!(
        (f.section_start.as_str(), f.section_end.as_str(), f.list),
        ("<|START_ACTION|>", "<|END_ACTION|>", true)
    );
    assert_eq!(
        (f.name_key.as_str(), f.arguments_key.as_str(), f.id_key.as_str(), f.id_first),
        ("tool_name", "parameters", "tool_call_id", true)
    );
    let tools = weather_tool();
    let text = "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 2}},\n    \
                {\"tool_call_id\": \"1\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 1}}\n]<|END_ACTION|>";
    assert_eq!(
        read_every_way(f, &tools, text),
        vec![
            ("get_weather".into(), json!({"city": "Oslo", "days": 2})),
            ("get_weather".into(), json!({"city": "Rome", "days": 1}))
        ]
    );
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(text.as_bytes()));
    assert!(!g.matches(text.replace("\"tool_call_id\": \"0\"", "\"tool_call_id\": \"x\"").as_bytes()));
}

/// A Kimi-K3-style template, written for this test: tag attributes carry the tool name,
/// a 1-based call index and each argument's JSON type (`type="string"` for bare
/// text, `type="number"`, `"boolean"`, … for JSON).
const TYPED_ATTRIBUTES_STYLE: &str = r#"{%- macro jtype(v) -%}
{%- if v is boolean -%}boolean{%- elif v is none -%}null{%- elif v is number -%}number
{%- elif v is string -%}string{%- elif v is mapping -%}object{%- else -%}array{%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
<|open|>message role="{{ m.role }}"<|sep|>
{%- if m.role == 'assistant' -%}
<|open|>response<|sep|>{{ m.content or '' }}<|close|>response<|sep|>
{%- if m.tool_calls -%}<|open|>tools<|sep|>
{%- for c in m.tool_calls -%}
<|open|>call tool="{{ c.function.name }}" index="{{ loop.index }}"<|sep|>
{%- for k, v in c.function.arguments.items() -%}
<|open|>argument key="{{ k }}" type="{{ jtype(v) }}"<|sep|>{{ v if v is string else v | tojson }}<|close|>argument<|sep|>
{%- endfor -%}
<|close|>call<|sep|>
{%- endfor -%}
<|close|>tools<|sep|>
{%- endif -%}
{%- else -%}{{ m.content }}{%- endif -%}
<|close|>message<|sep|>
{%- endfor -%}
{%- if tools -%}<|open|>tools<|sep|>{{ tools | tojson }}<|close|>tools<|sep|>{%- endif -%}
{%- if add_generation_prompt -%}<|open|>message role="assistant"<|sep|>{%- endif -%}"#;

/// An LFM2.5-style template, written for this test: pythonic calls whose strings are
/// in single quotes (`city='Oslo'`), other values as JSON.
const SINGLE_QUOTED_PYTHONIC_STYLE: &str = r#"{%- macro arg(v) -%}
{%- if v is string -%}{{ "'" + v + "'" }}{%- else -%}{{ v | tojson }}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}<|im_start|>system
List of tools: {{ tools | tojson }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif -%}
{%- if m.tool_calls -%}<|tool_call_start|>[
{%- for c in m.tool_calls -%}
{{ c.function.name }}(
{%- for k, v in c.function.arguments.items() -%}{{ k }}={{ arg(v) }}{{ ", " if not loop.last }}{%- endfor -%}
){{ ", " if not loop.last }}
{%- endfor -%}
]<|tool_call_end|>
{%- endif -%}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"#;

/// An Apriel-1.5-style template, written for this test: JSON calls whose arguments
/// are printed with `|string`, which writes an object as a Python dict
/// (`{'city': 'Oslo'}`) and a JSON string as itself.
const ARGUMENTS_THROUGH_STRING_STYLE: &str = r#"{%- for m in messages -%}
<|{{ m.role }}|>
{{ m.content or '' }}
{%- if m.tool_calls -%}
<tool_calls>[
{%- for c in m.tool_calls -%}
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | string }}}{{ ", " if not loop.last }}
{%- endfor -%}
]</tool_calls>
{%- endif %}
<|end|>
{% endfor -%}
{%- if tools -%}<|system|>
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|end|>
{% endif -%}
{%- if add_generation_prompt -%}<|assistant|>
{% endif -%}"#;

#[test]
fn typed_attribute_single_quoted_and_string_argument_layouts_are_derived() {
    let tools = weather_tool();
    let setup = |name: &str, source: &str| {
        let templates = GgufTemplates { default: Some(source.to_string()), tool_use: None };
        let setup = inspect(&templates, None, None).unwrap();
        assert_eq!(setup.layout.round_trip.split(',').next(), Some("passed"), "{name}: {:?}", setup.layout);
        assert!(setup.layout.parallel, "{name}");
        setup
    };

    // Typed attributes: the index after the name is the call's, and every JSON type
    // gets its own key end, in the grammar and in the parser.
    let typed = setup("typed", TYPED_ATTRIBUTES_STYLE);
    let f = typed.layout.format.as_ref().unwrap();
    assert_eq!(f.name_index_separator, "\" index=\"");
    let tags = f.params.as_ref().unwrap();
    assert_eq!(tags.key_end_json.as_deref(), Some("\" type=\"{type}\"<|sep|>"));
    let call = |i: usize, city: &str, days: &str, metric: &str| {
        format!(
            "<|open|>call tool=\"get_weather\" index=\"{i}\"<|sep|>\
             <|open|>argument key=\"city\" type=\"string\"<|sep|>{city}<|close|>argument<|sep|>\
             <|open|>argument key=\"days\" type=\"number\"<|sep|>{days}<|close|>argument<|sep|>\
             <|open|>argument key=\"metric\" type=\"boolean\"<|sep|>{metric}<|close|>argument<|sep|><|close|>call<|sep|>"
        )
    };
    let text = format!(
        "<|close|>response<|sep|><|open|>tools<|sep|>{}{}<|close|>tools",
        call(1, "4711", "3", "true"),
        call(2, "a <b> & c <|close|>argument, the tag's text", "1", "false")
    );
    assert_eq!(
        read_every_way(f, &tools, &text),
        vec![
            ("get_weather".into(), json!({"city": "4711", "days": 3, "metric": true})),
            // A value holding its closing tag's text is read whole.
            (
                "get_weather".into(),
                json!({"city": "a <b> & c <|close|>argument, the tag's text", "days": 1, "metric": false})
            )
        ]
    );
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    let plain = text.replace("a <b> & c <|close|>argument, the tag's text", "Oslo");
    assert!(g.matches(plain.as_bytes()));
    // A boolean may not claim to be a number, nor a number a string.
    assert!(!g.matches(plain.replace("\"metric\" type=\"boolean\"", "\"metric\" type=\"number\"").as_bytes()));
    assert!(!g.matches(plain.replace("\"days\" type=\"number\"", "\"days\" type=\"string\"").as_bytes()));

    // Single-quoted Python strings: read, and written by the grammar, with `'` quotes.
    let pythonic = setup("pythonic", SINGLE_QUOTED_PYTHONIC_STYLE);
    let f = pythonic.layout.format.as_ref().unwrap();
    assert!(f.single_quotes);
    let text = r"<|tool_call_start|>[get_weather(city='Bergen \'sentrum\'', days=2, metric=True)]<|tool_call_end|>";
    assert_eq!(
        read_every_way(f, &tools, text),
        vec![("get_weather".into(), json!({"city": "Bergen 'sentrum'", "days": 2, "metric": true}))]
    );
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(text.as_bytes()));
    assert!(!g.matches(text.replace("city='Bergen \\'sentrum\\''", "city=\"Bergen\"").as_bytes()));

    // Objects through `|string` are Python dicts: the calls are read with arguments
    // passed as JSON strings, which the template prints as the JSON it asks for.
    let strings = setup("through-string", ARGUMENTS_THROUGH_STRING_STYLE);
    assert!(strings.layout.string_arguments, "{:?}", strings.layout);
    assert!(strings.layout.round_trip.contains("with arguments passed as JSON strings"));
    let f = strings.layout.format.as_ref().unwrap();
    let text = r#"<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]</tool_calls>"#;
    assert_eq!(read_every_way(f, &tools, text), vec![("get_weather".into(), json!({"city": "Oslo", "days": 2}))]);
    // The next turn shows earlier calls to the template the same way.
    let gguf = toolgate::gguf::GgufFile::open(crate::common::model(crate::common::SMOLLM2)).unwrap();
    let tok = toolgate::tokenizer::Tokenizer::from_gguf(&gguf).unwrap();
    let history = vec![
        json!({"role": "user", "content": "Weather in Oslo?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"days\":2}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}),
    ];
    let (prompt, _) =
        toolgate::engine::prompt::encode_chat_within(&strings, &tok, history, None, Default::default(), 4096).unwrap();
    assert!(prompt.contains(r#"{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}"#), "{prompt}");
}

/// A look-alike of a template that writes its calls as compact JSON (its own
/// `tojson(separators=…)`), name and arguments in one object.
const COMPACT_JSON_STYLE: &str = r#"{%- for m in messages -%}
<|{{ m.role }}|>
{{ m.content or '' }}
{%- if m.tool_calls -%}
{%- for c in m.tool_calls -%}
<|call|>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson(separators=(",", ":")) }}<|/call|>
{%- endfor -%}
{%- endif %}
<|end|>
{% endfor -%}
{%- if tools -%}<|system|>
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|end|>
{% endif -%}
{%- if add_generation_prompt -%}<|assistant|>
{% endif -%}"#;

/// A derived layout spells the JSON of its calls (the body's members, the arguments)
/// as its template renders them, so the grammar forces one spelling instead of a
/// choice at every separator; a template that prints the client's argument strings
/// leaves the choice to the model.
/// A pythonic template written for this test, printing each argument as `VALUE` and
/// `SEP` after all but the last: what vLLM's example templates for Llama 3.2 and
/// ToolACE (`{{ value }}`: bare strings), Llama 4 (`"{{ value }}"`: every value
/// quoted) and Gemma 3 (no comma) print.
const PYTHON_QUIRKS_STYLE: &str = r#"{%- if tools -%}<|im_start|>system
Functions: {{ tools | tojson }}
Call them as [name(arg="value", n=1)].<|im_end|>
{% endif -%}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif -%}
{%- if m.tool_calls -%}<calls>[
{%- for c in m.tool_calls -%}
{{ c.function.name }}(
{%- for k, v in c.function.arguments.items() -%}{{ k }}=VALUESEP{%- endfor -%}
){{ ", " if not loop.last }}
{%- endfor -%}
]</calls>
{%- endif -%}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"#;

#[test]
fn python_arguments_a_template_prints_unlike_python_are_derived_read_and_admitted() {
    use toolgate::tools::format::PythonQuirks;
    let tools = weather_tool();
    let layout = |value: &str, sep: &str| {
        let source = PYTHON_QUIRKS_STYLE.replace("VALUE", value).replace("SEP", sep);
        let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
        assert_eq!(setup.layout.round_trip.split(',').next(), Some("passed"), "{value}: {:?}", setup.layout);
        assert!(setup.layout.parallel);
        setup.layout.format.unwrap()
    };
    let comma = r#"{{ ", " if not loop.last }}"#;
    let check = |f: &ToolFormat, admitted: &[(&str, Value)], refused: &[&str]| {
        let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
        for (args, want) in admitted {
            let text = format!("<calls>[get_weather{args}]</calls>");
            assert_eq!(read_every_way(f, &tools, &text), vec![("get_weather".into(), want.clone())], "{text}");
            assert!(g.matches(text.as_bytes()), "the grammar refuses {text}");
        }
        for args in refused {
            assert!(!g.matches(format!("<calls>[get_weather{args}]</calls>").as_bytes()), "admitted: {args}");
        }
    };
    // Python's own spelling derives no quirk.
    let f = layout("{{ v | tojson }}", comma);
    assert_eq!(f.python_quirks, PythonQuirks::default());
    check(&f, &[(r#"(city="Oslo", days=2)"#, json!({"city": "Oslo", "days": 2}))], &["(city=Oslo, days=2)"]);

    // `{{ v }}`: strings bare, the rest as Jinja prints it (`True`).
    let f = layout("{{ v }}", comma);
    assert_eq!(f.python_quirks, PythonQuirks { bare_strings: true, ..Default::default() });
    check(
        &f,
        &[
            ("(city=New York, days=2, metric=True)", json!({"city": "New York", "days": 2, "metric": true})),
            // A string parameter's bare value is a string whatever it reads as.
            ("(city=4711, days=2)", json!({"city": "4711", "days": 2})),
            (r#"(city="Oslo, Norway", days=2)"#, json!({"city": "Oslo, Norway", "days": 2})),
        ],
        &["(city=Oslo, Norway, days=2)", "(city=Oslo, days=two)", r#"(city=Oslo, days="2")"#],
    );

    // `"{{ v }}"`: every value quoted; a quoted number is the number.
    let f = layout(r#""{{ v }}""#, comma);
    assert_eq!(f.python_quirks, PythonQuirks { quoted_scalars: true, ..Default::default() });
    check(
        &f,
        &[
            (r#"(city="Oslo", days="2", metric="True")"#, json!({"city": "Oslo", "days": 2, "metric": true})),
            (r#"(city="Oslo", days=2, metric=False)"#, json!({"city": "Oslo", "days": 2, "metric": false})),
        ],
        &[r#"(city="Oslo", days="two")"#, r#"(city="Oslo", days="2.5")"#, "(city=Oslo, days=2)"],
    );

    // No comma between the arguments; the grammar admits Python's comma too.
    let f = layout("{{ v | tojson }}", "");
    assert_eq!(f.python_quirks, PythonQuirks { no_commas: true, ..Default::default() });
    check(
        &f,
        &[
            (r#"(city="Oslo"days=2)"#, json!({"city": "Oslo", "days": 2})),
            (r#"(city="Oslo", days=2, metric=True)"#, json!({"city": "Oslo", "days": 2, "metric": true})),
        ],
        &[r#"(city="Oslo"days=2days=3)"#, "(city=Oslo days=2)"],
    );
}

#[test]
fn derived_json_layouts_spell_separators_as_their_template_does() {
    use toolgate::grammar::regex::Spacing;
    let tools = weather_tool();
    let layout = |source: String| {
        let templates = GgufTemplates { default: Some(source), tool_use: None };
        let setup = inspect(&templates, None, None).unwrap();
        assert_eq!(setup.layout.round_trip.split(',').next(), Some("passed"), "{:?}", setup.layout);
        setup.layout.format.unwrap()
    };
    let accepts = |f: &ToolFormat, text: &str| {
        calls_grammar_plain(f, &tools, &ToolChoice::Required, false)
            .unwrap()
            .compile()
            .unwrap()
            .matches(text.as_bytes())
    };
    let spaced = r#"{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}"#;
    let compact = r#"{"name":"get_weather","arguments":{"city":"Oslo","days":2}}"#;
    let mixed = r#"{"name": "get_weather", "arguments": {"city":"Oslo", "days": 2}}"#;

    // Qwen 2.5 (Hermes layout) renders calls with transformers' `tojson`.
    let qwen = layout(std::fs::read_to_string(templates_dir().join("Qwen-Qwen2.5-7B-Instruct.jinja")).unwrap());
    assert_eq!(qwen.spacing, Spacing::Spaced, "{qwen:?}");
    let wrap = |body: &str| format!("<tool_call>\n{body}\n</tool_call>");
    assert!(accepts(&qwen, &wrap(spaced)));
    assert!(!accepts(&qwen, &wrap(compact)) && !accepts(&qwen, &wrap(mixed)));

    let tight = layout(COMPACT_JSON_STYLE.to_string());
    assert_eq!(tight.spacing, Spacing::Compact, "{tight:?}");
    let wrap = |body: &str| format!("<|call|>{body}<|/call|>");
    assert!(accepts(&tight, &wrap(compact)) && !accepts(&tight, &wrap(spaced)));

    // Arguments printed as the client's strings: their spelling is not the template's.
    let strings = layout(ARGUMENTS_THROUGH_STRING_STYLE.to_string());
    assert_eq!(strings.spacing, Spacing::Optional, "{strings:?}");
    let wrap = |body: &str| format!("<tool_calls>[{body}]</tool_calls>");
    assert!([spaced, compact, mixed].iter().all(|b| accepts(&strings, &wrap(b))));

    // Across the corpus: each layout with a fixed spelling (derived, or an override that
    // reads the template's calls) refuses its own sample respelled the other way (the
    // round trip already accepts the sample).
    let (mut fixed, mut optional) = (Vec::new(), Vec::new());
    for (name, source) in corpus() {
        let templates = GgufTemplates { default: Some(source), tool_use: None };
        let setup = inspect(&templates, None, None).unwrap();
        let (Some(f), Some(sample)) = (&setup.layout.format, &setup.layout.sample) else { continue };
        if f.spacing == Spacing::Optional {
            optional.push(name);
            continue;
        }
        let respelled = match f.spacing {
            Spacing::Spaced => sample.replacen("\": ", "\":", 1),
            _ => sample.replacen("\":", "\": ", 1),
        };
        let g = calls_grammar_plain(f, &probe_tools(), &ToolChoice::Required, setup.layout.parallel)
            .unwrap()
            .compile()
            .unwrap();
        assert!(g.matches(sample.as_bytes()) && !g.matches(respelled.as_bytes()), "{name}: {sample:?}");
        fixed.push(format!("{name} {:?}", f.spacing));
    }
    eprintln!("{}\noptional: {optional:?}", fixed.join("\n"));
    assert!(fixed.len() >= 20, "only {} layouts with a fixed spelling: {fixed:?}", fixed.len());
}

/// A layout of this test's own that prints a call's arguments sorted by Jinja's
/// `dictsort` (as Gemma 4's templates do), and the same layout printing them as given.
const SORTED_KEYS_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.tool_calls -%}<|calls|>{%- for c in m.tool_calls -%}{%- if not loop.first %}, {% endif -%}
<call>{"name": "{{ c.function.name }}", "arguments": {
{%- for k, v in c.function.arguments | dictsort -%}{%- if not loop.first %}, {% endif -%}"{{ k }}": {{ v | tojson }}{%- endfor -%}
}}</call>{%- endfor -%}<|end|>
{%- else -%}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif -%}
{%- endfor -%}{%- if tools %}<|tools|>{{ tools | tojson }}<|end|>{% endif -%}
{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"#;

/// A tool whose parameters are declared out of name order: `unit`, `City`, `days`.
fn unsorted_tool() -> Vec<Tool> {
    vec![serde_json::from_value(json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "City": {"type": "string"},
        "days": {"type": "integer"}}, "required": ["unit", "City", "days"]}}}))
    .unwrap()]
}

/// `t` rendered with one call of [`unsorted_tool`], its arguments given in the
/// schema's order; the text from the first occurrence of `from` to the end of the
/// next occurrence of `to`, with the layout's control tokens as the model generates
/// them (the special prefix before each).
fn rendered_call(t: &ChatTemplate, from: &str, to: &str, control: &[&str]) -> Vec<u8> {
    let tools: Vec<Value> = unsorted_tool().iter().map(|t| serde_json::to_value(t).unwrap()).collect();
    let messages = vec![
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0a1b2c3d4e5f", "type": "function",
            "function": {"name": "get_weather", "arguments": {"unit": "c", "City": "Oslo", "days": 3}}}]}),
    ];
    let mut req = toolgate::template::RenderRequest::new(messages);
    req.tools = Some(tools);
    req.add_generation_prompt = false;
    let out = t.render(&req).unwrap();
    let start = out.find(from).unwrap();
    let text = &out[start..start + out[start..].find(to).unwrap() + to.len()];
    let mut bytes = text.as_bytes().to_vec();
    for c in control {
        let mut with_prefix = vec![toolgate::tokenizer::SPECIAL_PREFIX];
        with_prefix.extend_from_slice(c.as_bytes());
        let mut replaced = Vec::new();
        let mut rest = &bytes[..];
        while let Some(at) = rest.windows(c.len()).position(|w| w == c.as_bytes()) {
            replaced.extend_from_slice(&rest[..at]);
            replaced.extend_from_slice(&with_prefix);
            rest = &rest[at + c.len()..];
        }
        replaced.extend_from_slice(rest);
        bytes = replaced;
    }
    bytes
}

/// A template that prints a call's argument keys sorted (`dictsort`) gets a layout
/// whose grammar writes them sorted — the text the template renders, not the schema's
/// order; a template that prints them as given keeps the schema's order. On Gemma 4's
/// own template (the `gemma4` override, its key order read off the template) and on a
/// look-alike of this test's own.
#[test]
fn layouts_write_argument_keys_in_the_order_their_template_prints_them() {
    use toolgate::tools::format::KeyOrder;
    let tools = unsorted_tool();
    let sorted = ChatTemplate::new("sorted", SORTED_KEYS_STYLE).unwrap();
    let as_given = ChatTemplate::new("as-given", SORTED_KEYS_STYLE.replace(" | dictsort", ".items()")).unwrap();
    for (t, order) in [(&sorted, KeyOrder::Sorted), (&as_given, KeyOrder::Schema)] {
        let d = derive(t, true).unwrap();
        assert_eq!(d.format.key_order, order, "{}", t.name());
        let text = rendered_call(t, "<|calls|>", "<|end|>", &[]);
        let text = std::str::from_utf8(&text).unwrap().strip_suffix("<|end|>").unwrap().to_string();
        let want = json!({"unit": "c", "City": "Oslo", "days": 3});
        assert_eq!(read_every_way(&d.format, &tools, &text), vec![("get_weather".to_string(), want)]);
        let g = calls_grammar_plain(&d.format, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
        assert!(g.matches(text.as_bytes()), "{}: {text}", t.name());
        // The other order is not the model's: the grammar refuses it.
        let schema_order = r#"{"unit": "c", "City": "Oslo", "days": 3}"#;
        let sorted_order = r#"{"City": "Oslo", "days": 3, "unit": "c"}"#;
        let (mine, other) =
            if order == KeyOrder::Sorted { (sorted_order, schema_order) } else { (schema_order, sorted_order) };
        assert!(text.contains(mine), "{text}");
        assert!(!g.matches(text.replace(mine, other).as_bytes()), "{}", t.name());
    }
    // Gemma 4: `{%- for key, value in function['arguments'] | dictsort -%}`.
    let gemma4 = template("google-gemma-4-31B-it.jinja");
    let setup =
        inspect(&GgufTemplates { default: Some(gemma4.source().to_string()), tool_use: None }, None, None).unwrap();
    let f = setup.layout.format.as_ref().unwrap();
    assert_eq!((f.family.as_str(), f.key_order), ("gemma4", KeyOrder::Sorted));
    let quote = "<|\"|>";
    let text = rendered_call(&gemma4, "<|tool_call>", "<tool_call|>", &[quote]);
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(&text), "{}", String::from_utf8_lossy(&text));
    let shown = String::from_utf8_lossy(&text).into_owned();
    assert!(shown.contains("{City:"), "{shown}");
    let mut schema_first = f.clone();
    schema_first.key_order = KeyOrder::Schema;
    let g = calls_grammar_plain(&schema_first, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(!g.matches(&text), "the schema's order is not what Gemma 4 renders");
    // The templates of the corpus that print keys sorted.
    let sorting: Vec<String> = corpus()
        .into_iter()
        .filter(|(_, source)| {
            let templates = GgufTemplates { default: Some(source.clone()), tool_use: None };
            inspect(&templates, None, None)
                .is_ok_and(|s| s.layout.format.is_some_and(|f| f.key_order == KeyOrder::Sorted))
        })
        .map(|(name, _)| name)
        .collect();
    eprintln!("sorted keys: {sorting:?}");
    assert!(sorting.iter().any(|n| n.contains("gemma-4")), "{sorting:?}");
}

/// A template that quotes strings with a control token of its own — FunctionGemma's
/// `<escape>` where Gemma 4 has `<|"|>` (`tests/fixtures/templates/
/// functiongemma-style.jinja`, a look-alike of ours) — gets Gemma's dialect with that
/// quote, read off the template: the parser reads the calls it renders, and the
/// grammar writes strings between that token, as a control token (never as text, and
/// never Gemma 4's).
#[test]
fn a_string_quote_token_is_read_off_the_template() {
    use toolgate::tools::format::{ArgsDialect, KeyOrder};
    let source = crate::common::fixture_text("templates/functiongemma-style.jinja");
    let t = ChatTemplate::new("functiongemma-style", source.clone()).unwrap();
    let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
    assert_eq!((setup.layout.origin, setup.layout.round_trip.as_str()), (Origin::Derived, "passed"));
    let f = setup.layout.format.as_ref().unwrap();
    assert_eq!(
        (f.dialect, f.string_quote.as_str(), f.gemma_quote(), f.key_order),
        (ArgsDialect::Gemma4, "<escape>", "<escape>", KeyOrder::Sorted)
    );
    assert_eq!((f.call_start.as_str(), f.call_end.as_str()), ("<start_function_call>call:", "<end_function_call>"));
    let tools = unsorted_tool();
    let text = rendered_call(&t, "<start_function_call>", "<end_function_call>", &[]);
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        text,
        "<start_function_call>call:get_weather{City:<escape>Oslo<escape>,days:3,unit:<escape>c<escape>}<end_function_call>"
    );
    let want = json!({"unit": "c", "City": "Oslo", "days": 3});
    assert_eq!(read_every_way(f, &tools, &text), vec![("get_weather".to_string(), want)]);
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    let generated = rendered_call(&t, "<start_function_call>", "<end_function_call>", &["<escape>"]);
    assert!(g.matches(&generated), "{}", String::from_utf8_lossy(&generated));
    assert!(!g.matches(text.as_bytes()), "the quote spelled as text is not the control token");
    let gemma4 = String::from_utf8_lossy(&generated).replace("<escape>", "<|\"|>");
    assert!(!g.matches(gemma4.as_bytes()), "Gemma 4's quote is not this template's");
    // The gemma4 override keeps Gemma 4's quote.
    let gemma4 = toolgate::tools::format::for_family("gemma4").unwrap().unwrap();
    assert_eq!((gemma4.string_quote.as_str(), gemma4.gemma_quote()), ("", "<|\"|>"));
}

/// A layout of this test's own with the call's id between the call start and the
/// name, as Solar Open's template writes it; each turn ends with `<|turn_end|>`.
const ID_BEFORE_NAME_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.tool_calls -%}<|calls|>{%- for c in m.tool_calls -%}
<|call|>{{ c.id }}<|name|>{{ c.function.name }}<|args|>{{ c.function.arguments | tojson }}<|/call|>
{%- endfor -%}<|/calls|><|turn_end|>
{%- else -%}<|{{ m.role }}|>{{ m.content }}<|turn_end|>{%- endif -%}
{%- endfor -%}{%- if tools %}<|tools|>{{ tools | tojson }}<|turn_end|>{% endif -%}
{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"#;

/// A layout of this test's own with the call's id after the name, as Mistral Small
/// 3.2's template writes it (`[CALL_ID]`, nine letters and digits); a call turn ends
/// with the `eos_token`, where generation ends.
const ID_AFTER_NAME_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}
{%- if c.id | length != 9 -%}{{ raise_exception("ids are nine letters and digits") }}{%- endif -%}
[CALLS]{{ c.function.name }}[ID]{{ c.id }}[ARGS]{{ c.function.arguments | tojson }}
{%- endfor -%}{{ eos_token }}
{%- else -%}[{{ m.role | upper }}]{{ m.content }}{%- if m.role == "assistant" %}{{ eos_token }}{% endif -%}{%- endif -%}
{%- endfor -%}{%- if tools %}[TOOLS]{{ tools | tojson }}[/TOOLS]{% endif -%}"#;

/// `t`'s render of an assistant turn with `ids.len()` calls of [`weather_tool`] with
/// those ids: the text from `from` to the end.
fn rendered_turn(t: &ChatTemplate, ids: &[&str], from: &str) -> String {
    let tools: Vec<Value> = weather_tool().iter().map(|t| serde_json::to_value(t).unwrap()).collect();
    let calls: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let city = ["Oslo", "Lima"][i % 2];
            json!({"id": id, "type": "function", "function": {"name": "get_weather",
                "arguments": {"city": city, "days": i + 1}}})
        })
        .collect();
    let messages = vec![
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": "", "tool_calls": calls}),
    ];
    let mut req = toolgate::template::RenderRequest::new(messages);
    req.tools = Some(tools);
    req.eos_token = "</s>".into();
    let out = t.render(&req).unwrap();
    out[out.find(from).unwrap()..].to_string()
}

/// Call ids inside the markers — between the call start and the name (Solar Open's
/// layout) or after the name (Mistral Small 3.2's) — are derived as an id slot, not as
/// a fixed marker holding the probe's id: calls with other ids are read back, and the
/// grammar writes an id of the template's shape there. The text a template writes
/// after the calls up to the end of generation is the layout's turn end: output that
/// ends with it, with a prefix of it (generation stopped at a special token) or with
/// it and the next turn still holds valid calls; any other trailing text does not.
#[test]
fn call_ids_inside_markers_are_slots_and_calls_end_where_the_turn_does() {
    use toolgate::tools::format::IdSlot;
    let tools = weather_tool();
    let want = vec![
        ("get_weather".to_string(), json!({"city": "Oslo", "days": 1})),
        ("get_weather".to_string(), json!({"city": "Lima", "days": 2})),
    ];
    let cases = [
        (ID_BEFORE_NAME_STYLE, IdSlot::BeforeName, ["call_7f3e2d1c", "call_0b9a8c7d"], "<|calls|>", "<|turn_end|>"),
        (ID_AFTER_NAME_STYLE, IdSlot::AfterName, ["Zx9Yw8Vu7", "Ab1Cd2Ef3"], "[CALLS]", ""),
    ];
    for (source, slot, ids, from, turn_end) in cases {
        let setup = inspect(&GgufTemplates { default: Some(source.to_string()), tool_use: None }, None, None).unwrap();
        let l = &setup.layout;
        let f = l.format.as_ref().unwrap_or_else(|| panic!("no layout: {}", l.round_trip));
        assert_eq!((l.origin, f.id_slot, l.turn_end.as_str()), (Origin::Derived, slot, turn_end), "{l:?}");
        let turn = rendered_turn(&setup.template, &ids, from);
        let calls = turn.split("</s>").next().unwrap();
        let calls = if turn_end.is_empty() { calls } else { &calls[..calls.find(turn_end).unwrap()] };
        assert_eq!(read_every_way(f, &tools, calls), want, "{calls}");
        let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
        assert!(g.matches(calls.as_bytes()), "{calls}");
        // The id has the template's shape: no id, or a malformed one, is refused.
        let without = calls.replace(ids[0], "");
        assert!(!g.matches(without.as_bytes()), "{without}");
        // Output ending with the turn's end, or a piece of it, is accepted; other text is not.
        let read = |text: &str| toolgate::template::probe::read_output(&setup, &tools, text).unwrap();
        let report = read(&format!("{calls}{turn_end}"));
        assert!(report.ok && report.tool_calls.len() == 2, "{report:?}");
        if !turn_end.is_empty() {
            assert!(report.grammar.contains(turn_end), "{}", report.grammar);
            assert!(read(&format!("{calls}{}", &turn_end[..5])).ok);
            // What follows a whole turn end (the next turn) is not the model's.
            assert!(read(&format!("{calls}{turn_end}<|user|>Thanks")).ok);
            for extra in [" and more", "<|turn_x", "<|/call|>"] {
                let report = read(&format!("{calls}{extra}"));
                assert!(!report.ok && report.grammar.starts_with("rejected"), "{extra}: {}", report.grammar);
            }
        }
    }
}

/// A layout of this test's own that names each call in a header and again in its body,
/// with a role header between two calls, as Muse Glimmer's template writes them:
/// `to=NAME<|msg|><calls>\n<call name="NAME">{…}</call>\n</calls><|end_msg|><|start|>assistant to=…`.
const NAMED_TWICE_STYLE: &str = r#"{%- for m in messages -%}
{%- if m.tool_calls -%}<|start|>assistant {% for c in m.tool_calls -%}
{%- if not loop.first %}<|end_msg|><|start|>assistant {% endif -%}
to={{ c.function.name }}<|msg|><calls>
<call name="{{ c.function.name }}">{{ c.function.arguments | tojson }}</call>
</calls>{%- endfor -%}<|end_turn|>
{%- else -%}<|start|>{{ m.role }}<|msg|>{{ m.content }}<|end_turn|>{%- endif -%}
{%- endfor -%}{%- if tools %}<|start|>system<|msg|>{{ tools | tojson }}<|end_turn|>{% endif -%}
{%- if add_generation_prompt -%}<|start|>assistant {%- endif -%}"#;

/// A call named in a header and again in its body is derived as the name and the
/// text between (`name_again`), not as a marker holding the probe's name; the role
/// header a template writes between two calls is their separator, not content.
#[test]
fn calls_named_in_a_header_and_again_in_the_body_are_derived() {
    let tools = weather_tool();
    let setup =
        inspect(&GgufTemplates { default: Some(NAMED_TWICE_STYLE.to_string()), tool_use: None }, None, None).unwrap();
    let l = &setup.layout;
    let f = l.format.as_ref().unwrap_or_else(|| panic!("no layout: {}", l.round_trip));
    assert_eq!(
        (l.origin, f.name_end.as_str(), f.name_again.as_str()),
        (Origin::Derived, "<|msg|><calls>\n<call name=\"", "\">")
    );
    assert_eq!(f.separator, "<|end_msg|><|start|>assistant ");
    // Up to where the next message departs: the next turn's shared `<|start|>` too.
    assert_eq!(l.turn_end, "<|end_turn|><|start|>");
    let turn = rendered_turn(&setup.template, &["call_1", "call_2"], "to=");
    let calls = &turn[..turn.find("<|end_turn|>").unwrap()];
    let want = vec![
        ("get_weather".to_string(), json!({"city": "Oslo", "days": 1})),
        ("get_weather".to_string(), json!({"city": "Lima", "days": 2})),
    ];
    assert_eq!(read_every_way(f, &tools, calls), want, "{calls}");
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(calls.as_bytes()), "{calls}");
    // The body names the call the header named, no other.
    let other = calls.replacen("<call name=\"get_weather\"", "<call name=\"get_time\"", 1);
    assert!(!g.matches(other.as_bytes()), "{other}");
    assert!(toolgate::template::probe::read_output(&setup, &tools, &turn).unwrap().ok);
}

/// A vendor token before every tag and arguments as elements whose closing tag
/// repeats the key (MiniMax M3's layout; `templates/vendor-token-tags.jinja` is a
/// look-alike of ours, its token `<unused9>`): derived as tagged parameters whose value
/// end has a slot for the key. The calls read back, a boolean as the JSON the template
/// prints, and the grammar admits that text and no closing tag of another key; it
/// writes the token as the vocabulary's control token where there is one
/// (`tool_formats::a_vendor_token_before_every_tag_is_generated_as_the_control_token`).
#[test]
fn a_vendor_token_before_every_tag_and_closing_tags_that_repeat_the_key_are_derived() {
    use toolgate::tools::format::{ArgsDialect, KEY_SLOT};
    let source = crate::common::fixture_text("templates/vendor-token-tags.jinja");
    let t = ChatTemplate::new("vendor-token-tags", source.clone()).unwrap();
    let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
    let l = &setup.layout;
    let f = l.format.as_ref().unwrap_or_else(|| panic!("no layout: {}", l.round_trip));
    assert_eq!((l.origin, l.round_trip.as_str(), f.dialect), (Origin::Derived, "passed", ArgsDialect::XmlParameters));
    let p = f.params.as_ref().unwrap();
    assert_eq!(
        (p.key_start.as_str(), p.key_end.as_str(), p.value_end.clone()),
        ("<unused9><", ">", format!("<unused9></{KEY_SLOT}>"))
    );
    assert_eq!((f.call_start.as_str(), f.name_end.as_str()), ("<unused9><call fn=\"", "\">"));
    // The calls of an assistant turn with `calls` (name, arguments), as `t` renders
    // them. (The system turn names the tags too: the calls are the last turn's.)
    let render = |tools: &[Tool], calls: &[(String, Value)]| {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("c{i}"), "type": "function",
                "function": {"name": name, "arguments": args}})
            })
            .collect();
        let mut req = toolgate::template::RenderRequest::new(vec![
            json!({"role": "user", "content": "Weather?"}),
            json!({"role": "assistant", "content": "", "tool_calls": calls}),
        ]);
        req.tools = Some(tools.iter().map(|t| serde_json::to_value(t).unwrap()).collect());
        let out = t.render(&req).unwrap();
        out[out.rfind("<unused9><calls>").unwrap()..out.rfind("<end_of_turn>").unwrap()].to_string()
    };
    let tools = weather_tool();
    let want = vec![
        ("get_weather".to_string(), json!({"city": "Oslo", "days": 2, "metric": true})),
        ("get_weather".to_string(), json!({"city": "Lima </b> <c>", "days": 5})),
    ];
    let calls = &render(&tools, &want);
    assert_eq!(read_every_way(f, &tools, calls), want, "{calls}");
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(calls.as_bytes()), "{calls}");
    // A value closed by another key's tag is not a call.
    let crossed = calls.replacen("<unused9></days>", "<unused9></city>", 1);
    assert!(!g.matches(crossed.as_bytes()), "{crossed}");
    // Objects and arrays as more elements, as the template writes them.
    let tools: Vec<Tool> = vec![serde_json::from_value(json!({"type": "function", "function": {"name": "find",
        "parameters": {"type": "object", "properties": {"near": {"type": "object", "properties": {
            "city": {"type": "string"}, "km": {"type": "integer"}}, "required": ["city"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["near", "tags"]}}}))
    .unwrap()];
    let want = vec![("find".to_string(), json!({"near": {"city": "Oslo", "km": 5}, "tags": ["cafe", "open late"]}))];
    let calls = &render(&tools, &want);
    assert!(calls.contains("<unused9><tags><unused9><item>cafe<unused9></item>"), "{calls}");
    assert_eq!(read_every_way(f, &tools, calls), want, "{calls}");
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(calls.as_bytes()), "{calls}");
    // No fourth item (`maxItems: 3`), and the JSON spelling is admitted too.
    let item = "<unused9><item>x<unused9></item>";
    let four = calls.replacen("<unused9></tags>", &format!("{item}{item}<unused9></tags>"), 1);
    assert!(!g.matches(four.as_bytes()), "{four}");
    let json = calls.replacen(
        "<unused9><item>cafe<unused9></item><unused9><item>open late<unused9></item>",
        r#"["cafe","open late"]"#,
        1,
    );
    assert!(g.matches(json.as_bytes()), "{json}");
}

/// A layout of this test's own whose generation prompt ends with the call marker, as
/// Functionary v3.2's does: every assistant message opens with `>>>`, then `all` and
/// text, or a tool's name and its JSON arguments.
const PROMPT_OPENS_CALL_STYLE: &str = r#"{%- if tools -%}<|hdr|>system<|/hdr|>Tools: {{ tools | tojson }}<|end|>{%- endif -%}
{%- for m in messages -%}<|hdr|>{{ m.role }}<|/hdr|>
{%- if m.role == 'assistant' -%}
{%- if m.content -%}{{ '>>>all\n' + m.content }}{%- endif -%}
{%- for c in m.tool_calls or [] -%}{{ '>>>' + c.function.name + '\n' + (c.function.arguments if c.function.arguments is string else c.function.arguments | tojson) }}{%- endfor -%}
{%- else -%}{{ m.content }}{%- endif -%}<|end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|hdr|>assistant<|/hdr|>>>>{%- endif -%}"#;

/// A generation prompt that ends with the calls' marker (Functionary v3.2's `>>>`):
/// the layout says the prompt opens the first call, and that `all\n` after the marker
/// starts text. Output that begins after the marker reads back, as a call or as text,
/// at every split point; the constraint starts after the marker.
#[test]
fn a_prompt_that_opens_the_first_call_is_read_from_inside_it() {
    let setup =
        inspect(&GgufTemplates { default: Some(PROMPT_OPENS_CALL_STYLE.into()), tool_use: None }, None, None).unwrap();
    let l = &setup.layout;
    let f = l.format.as_ref().unwrap_or_else(|| panic!("no layout: {}", l.round_trip));
    assert_eq!((l.origin, l.round_trip.as_str()), (Origin::Derived, "passed"), "{l:?}");
    assert_eq!(
        (f.call_start.as_str(), f.name_end.as_str(), f.prompt_opens_call, f.text_start.as_str()),
        (">>>", "\n", true, "all\n"),
        "{f:?}"
    );
    let tools = weather_tool();
    let read = |text: &str| toolgate::template::probe::read_output(&setup, &tools, text).unwrap();
    let (one, two) = (
        r#"get_weather
{"city": "Oslo", "days": 3}"#,
        r#">>>get_weather
{"city": "Lima", "days": 2}"#,
    );
    let oslo = ("get_weather".to_string(), json!({"city": "Oslo", "days": 3}));
    let lima = ("get_weather".to_string(), json!({"city": "Lima", "days": 2}));
    // The model's output starts after the prompt's `>>>`.
    let report = read(one);
    assert!(report.ok && report.tool_calls.len() == 1 && report.content.is_empty(), "{report:?}");
    let report = read(&format!("{one}{two}"));
    assert!(report.ok && report.tool_calls.len() == 2, "{report:?}");
    assert_eq!(read_every_way(f, &tools, &format!(">>>{one}{two}")), vec![oslo.clone(), lima.clone()]);
    // Text: `all\n`, then the answer; then, maybe, calls.
    let report = read("all\nIt is sunny in Oslo.");
    assert_eq!(
        (report.content.as_str(), report.tool_calls.len(), report.unparsed_calls),
        ("It is sunny in Oslo.", 0, 0)
    );
    let text = format!(">>>all\nLet me look.{two}");
    assert_eq!(read_every_way(f, &tools, &text), vec![lima]);
    // The grammar is checked from the first call on, after the text.
    let report = read(&text[3..]);
    assert!(report.ok && report.tool_calls.len() == 1 && report.content == "Let me look.", "{report:?}");
    for incremental in [false, true] {
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut p = StreamParser::new(Some(f.clone()), incremental, 7).with_tools(&tools);
            p.push(&text[..i]);
            p.push(&text[i..]);
            p.finish();
            assert_eq!(p.output().content, "Let me look.", "split at {i}");
        }
    }
    // The grammar holds the marker: a constraint starts with it read.
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(format!(">>>{one}").as_bytes()) && g.matches(format!(">>>{one}{two}").as_bytes()));
    assert!(!g.matches(format!(">>>all\n{one}").as_bytes()));
    // A template whose prompt stops before the marker is not opened.
    let closed = PROMPT_OPENS_CALL_STYLE.replace("<|/hdr|>>>>{%- endif", "<|/hdr|>{%- endif");
    let setup = inspect(&GgufTemplates { default: Some(closed), tool_use: None }, None, None).unwrap();
    let f = setup.layout.format.as_ref().unwrap();
    assert_eq!((f.call_start.as_str(), f.prompt_opens_call, f.text_start.as_str()), (">>>", false, "all\n"));
    let report = toolgate::template::probe::read_output(&setup, &tools, ">>>all\nSunny.").unwrap();
    assert_eq!((report.content.as_str(), report.tool_calls.len(), report.unparsed_calls), ("Sunny.", 0, 0));
    let report = toolgate::template::probe::read_output(&setup, &tools, &format!(">>>{one}")).unwrap();
    assert!(report.ok && report.tool_calls.len() == 1, "{report:?}");
}

/// Qwen2.5-Coder-0.5B under Functionary v3.2's template, whose generation prompt ends
/// with the call marker `>>>`: a required call starts with the tool's name (the grammar
/// has read the marker), and in `auto` the model — never trained on this layout — writes
/// `${recipient}` after the marker, copied from the system prompt: that names no tool,
/// so it is the turn's text as written, not a call and not a failure.
#[test]
fn qwen_under_functionary_v3_2_calls_from_inside_the_prompts_marker() {
    use toolgate::engine::chat::{tool_turn, ToolMode};
    use toolgate::engine::{Engine, GenerateParams};
    use toolgate::model::DeviceChoice;
    use toolgate::template::{gate, ToolFallback};
    let mut engine = Engine::load(crate::common::model(crate::common::QWEN_CODER), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let path = templates_dir().join("meetkai-functionary-medium-v3.2.jinja");
    let setup = gate("qwen", &templates, Some("qwen2"), Some(&path), ToolFallback::None).unwrap();
    let f = setup.layout.format.clone().unwrap();
    assert!(f.prompt_opens_call && f.text_start == "all\n", "{f:?}");
    let tools = weather_tool();
    let msgs = vec![json!({"role": "user", "content": "What is the weather in Oslo for the next 3 days?"})];
    let params = GenerateParams { max_tokens: 40, ..GenerateParams::default() };
    let mut turn = |choice: ToolChoice| {
        tool_turn(&mut engine, &setup, msgs.clone(), &tools, &choice, false, ToolMode::Constrained, &params).unwrap()
    };
    let forced = turn(ToolChoice::Required);
    assert_eq!(
        (forced.tool_calls.len(), forced.parse_failures, forced.finish_reason),
        (1, 0, "tool_calls"),
        "{forced:?}"
    );
    let args: Value = serde_json::from_str(&forced.tool_calls[0].function.arguments).unwrap();
    assert!(jsonschema::validator_for(&tools[0].function.parameters).unwrap().is_valid(&args), "{args}");
    let auto = turn(ToolChoice::Auto);
    assert_eq!((auto.tool_calls.len(), auto.parse_failures), (0, 0), "{auto:?}");
    assert!(auto.content.starts_with("${recipient}") && !auto.content.contains(">>>${recipient}"), "{auto:?}");
}

/// `t` rendered with one call of `get_weather` with arguments `args` (passed as an
/// object); the text from the first `from` to the end of the next `to`, each control
/// token of `control` as the model generates it (the special prefix before it).
fn printed_call(t: &ChatTemplate, args: Value, from: &str, to: &str, control: &[&str]) -> (String, Vec<u8>) {
    let tools: Vec<Value> = weather_tool().iter().map(|t| serde_json::to_value(t).unwrap()).collect();
    let messages = vec![
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0a1b2c3d4e5f", "type": "function",
            "function": {"name": "get_weather", "arguments": args}}]}),
    ];
    let mut req = toolgate::template::RenderRequest::new(messages);
    req.tools = Some(tools);
    let out = t.render(&req).unwrap();
    let start = out.find(from).unwrap();
    let text = out[start..start + out[start..].find(to).unwrap() + to.len()].to_string();
    let mut generated = text.clone();
    for c in control {
        generated = generated.replace(c, &format!("\u{0}{c}"));
    }
    let bytes = generated.bytes().map(|b| if b == 0 { toolgate::tokenizer::SPECIAL_PREFIX } else { b }).collect();
    (text, bytes)
}

/// A template that prints every argument with `{{ value }}` between its string quote
/// tokens (`days:<escape>3<escape>`, `metric:<escape>True<escape>`: vLLM's
/// FunctionGemma example; `templates/printed-values.jinja`, a look-alike of ours):
/// the layout is Gemma's dialect with quoted scalars, the parser reads those values
/// back as the declared types, and the grammar admits them beside Gemma's own spelling
/// (`days:3`), but no other word in a number's place.
#[test]
fn values_the_template_prints_between_its_quotes_are_admitted_and_read_back() {
    use toolgate::tools::format::ArgsDialect;
    let source = crate::common::fixture_text("templates/printed-values.jinja");
    let t = ChatTemplate::new("printed-values", source.clone()).unwrap();
    let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
    assert_eq!((setup.layout.origin, setup.layout.round_trip.as_str()), (Origin::Derived, "passed"));
    let f = setup.layout.format.as_ref().unwrap();
    assert_eq!((f.dialect, f.gemma_quote(), f.python_quirks.quoted_scalars), (ArgsDialect::Gemma4, "<escape>", true));
    let tools = weather_tool();
    let (from, to) = ("<start_function_call>", "<end_function_call>");
    let (text, generated) =
        printed_call(&t, json!({"city": "Oslo", "days": 3, "metric": true}), from, to, &["<escape>"]);
    assert_eq!(
        text,
        "<start_function_call>call:get_weather{city:<escape>Oslo<escape>,days:<escape>3<escape>,\
         metric:<escape>True<escape>}<end_function_call>"
    );
    let want = json!({"city": "Oslo", "days": 3, "metric": true});
    assert_eq!(read_every_way(f, &tools, &text), vec![("get_weather".to_string(), want.clone())]);
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(&generated), "{text}");
    // Gemma's own spelling too, read back the same; a word where a number goes is not.
    let call = |args: &str, special: bool| -> Vec<u8> {
        let quote = if special { "\u{0}<escape>" } else { "<escape>" };
        let s = format!("{from}call:get_weather{{{}}}{to}", args.replace('|', quote));
        s.bytes().map(|b| if b == 0 { toolgate::tokenizer::SPECIAL_PREFIX } else { b }).collect()
    };
    let own = "city:|Oslo|,days:3,metric:true";
    assert!(g.matches(&call(own, true)));
    let own = String::from_utf8(call(own, false)).unwrap();
    assert_eq!(read_every_way(f, &tools, &own), vec![("get_weather".to_string(), want)]);
    for bad in ["city:|Oslo|,days:|three|", "city:|Oslo|,days:3,metric:|true|", "city:Oslo,days:3"] {
        assert!(!g.matches(&call(bad, true)), "{bad}");
    }
}

/// A template that prints a call's arguments with `{{ arguments }}` inside its JSON
/// body, so arguments passed as an object print as Python's `repr` of a dict (vLLM's
/// Phi-4-mini example; `templates/printed-mapping.jinja`, a look-alike of ours): the
/// layout's arguments are the python_dict dialect, read back from that spelling and
/// from JSON, and the grammar admits either spelling whole, not a mix. The prompt
/// gives the template arguments as JSON strings, so earlier calls show as JSON.
#[test]
fn arguments_printed_as_a_python_dict_are_admitted_beside_json() {
    use toolgate::tools::format::{ArgsDialect, BodyKind};
    let source = crate::common::fixture_text("templates/printed-mapping.jinja");
    let t = ChatTemplate::new("printed-mapping", source.clone()).unwrap();
    let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
    // The prompt passes arguments as JSON strings, which the template prints as that
    // JSON; the layout, read with objects, admits the dict too.
    assert_eq!(setup.layout.origin, Origin::Derived);
    assert!(setup.layout.round_trip.starts_with("passed, with arguments passed as JSON strings"));
    assert!(setup.layout.string_arguments);
    let f = setup.layout.format.as_ref().unwrap();
    assert_eq!(
        (f.body, f.dialect, f.section_start.as_str()),
        (BodyKind::JsonNameArguments, ArgsDialect::PythonDict, "[calls]")
    );
    let tools = weather_tool();
    let args = json!({"city": "Oslo", "days": 3, "metric": true});
    let (text, generated) = printed_call(&t, args.clone(), "[calls]", "[/calls]", &[]);
    assert_eq!(
        text,
        r#"[calls]{"name": "get_weather", "arguments": {'city': 'Oslo', 'days': 3, 'metric': True}}[/calls]"#
    );
    let g = calls_grammar_plain(f, &tools, &ToolChoice::Required, true).unwrap().compile().unwrap();
    assert!(g.matches(&generated), "{text}");
    assert_eq!(read_every_way(f, &tools, &text), vec![("get_weather".to_string(), args.clone())]);
    let json_text =
        r#"[calls]{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3, "metric": true}}[/calls]"#;
    assert!(g.matches(json_text.as_bytes()));
    assert_eq!(read_every_way(f, &tools, json_text), vec![("get_weather".to_string(), args)]);
    for mixed in [r#"{'city': "Oslo", 'days': 3}"#, r#"{"city": "Oslo", "days": 3, "metric": True}"#] {
        let text = format!(r#"[calls]{{"name": "get_weather", "arguments": {mixed}}}[/calls]"#);
        assert!(!g.matches(text.as_bytes()), "{text}");
    }
}
