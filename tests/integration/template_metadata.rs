//! Hand-written tool templates in TabbyAPI's style (`tool_start`, `tool_end` and
//! `stop_strings` set at the top): the two examples of `templates/` give their own
//! call layout (metadata wins over derivation), round-trip the history they render
//! through `toolgate tools parse`, and serve SmolLM2 through the OpenAI SDK.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use toolgate::template::metadata;
use toolgate::template::render::RenderRequest;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{inspect, ChatTemplate};
use toolgate::tools::layout::Origin;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("templates").join(name)
}

const EXAMPLES: [(&str, &str, Option<&str>, &[&str]); 2] = [
    ("chatml-tools.jinja", "<tool_call>", Some("</tool_call>"), &["<|im_start|>", "<|im_end|>"]),
    ("llama3-tools.jinja", "functools", None, &["<|eot_id|>", "<|start_header_id|>"]),
];

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}])
}

#[test]
fn example_templates_declare_their_layout_and_round_trip_their_history() {
    for (name, start, end, stops) in EXAMPLES {
        let source = std::fs::read_to_string(example(name)).unwrap();
        let t = ChatTemplate::new(name, source.clone()).unwrap();
        let m = metadata::read(&t).unwrap();
        assert_eq!((m.tool_start.as_deref(), m.tool_end.as_deref()), (Some(start), end), "{name}");
        assert_eq!(m.stop_strings, stops, "{name}");

        // The gate takes the layout from the metadata, and the template's own rendering
        // of calls reads back through it.
        let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
        assert!(setup.report.caps.tool_capable(), "{name}: {:?}", setup.report);
        let l = &setup.layout;
        assert_eq!((l.origin, l.round_trip.as_str(), l.parallel), (Origin::Metadata, "passed", true), "{name}: {l:?}");
        assert_eq!(setup.stop_strings, stops);

        // A two-turn tool conversation: the assistant's second turn, as the template
        // renders it in the history, parses back to its calls through `tools parse`,
        // and the constrained grammar accepts it.
        let second = json!([
            {"id": "call_b1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Bergen", "days": 2}}},
            {"id": "call_b2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tromsø"}}}
        ]);
        let messages = vec![
            json!({"role": "system", "content": "You are terse."}),
            json!({"role": "user", "content": "Weather in Oslo?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_a1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}),
            json!({"role": "tool", "tool_call_id": "call_a1", "content": "sunny"}),
            json!({"role": "user", "content": "And Bergen and Tromsø?"}),
            json!({"role": "assistant", "content": null, "tool_calls": second}),
        ];
        let mut req = RenderRequest::new(messages);
        req.tools = Some(weather_tools().as_array().unwrap().clone());
        req.add_generation_prompt = false;
        let text = t.render(&req).unwrap();
        let at = text.rfind(start).unwrap();
        let turn = &text[at..];
        let turn = match end {
            Some(end) => &turn[..turn.find(end).unwrap() + end.len()],
            None => &turn[..turn.rfind(']').unwrap() + 1],
        };
        let tools_file = std::env::temp_dir().join(format!("toolgate-meta-tools-{}-{name}.json", std::process::id()));
        std::fs::write(&tools_file, weather_tools().to_string()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["tools", "parse", "--chat-template"])
            .arg(example(name))
            .arg("--tools")
            .arg(&tools_file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(turn.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let _ = std::fs::remove_file(&tools_file);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(out.status.success(), "{name}: {report:#}\n{turn}");
        // (The template indents its JSON; the constraint writes it compact.)
        assert!(report["grammar"].as_str().unwrap().starts_with("accepted"), "{name}: {report:#}");
        let calls: Vec<(String, Value)> = report["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let f = &c["function"];
                (
                    f["name"].as_str().unwrap().to_string(),
                    serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                ("get_weather".to_string(), json!({"city": "Bergen", "days": 2})),
                ("get_weather".to_string(), json!({"city": "Tromsø"}))
            ],
            "{name}"
        );
        assert_eq!(report["content"], "", "{name}");
    }
}

#[test]
fn metadata_that_is_not_what_it_must_be_is_a_clear_error() {
    let t = ChatTemplate::new("bad", "{%- set tool_start = 3 -%}{{ messages }}").unwrap();
    let e = metadata::read(&t).unwrap_err().to_string();
    assert!(e.contains("`tool_start` is not a string"), "{e}");
    let t = ChatTemplate::new("bad", "{%- set stop_strings = \"<|end|>\" -%}{{ messages }}").unwrap();
    let e = metadata::read(&t).unwrap_err().to_string();
    assert!(e.contains("stop_strings"), "{e}");
    // The gate reports it instead of serving a layout.
    let setup = inspect(
        &GgufTemplates { default: Some("{%- set tool_start = [1] -%}{{ messages }}".into()), tool_use: None },
        None,
        None,
    )
    .unwrap();
    assert!(setup.layout.format.is_none() && setup.layout.round_trip.contains("tool_start"), "{:?}", setup.layout);
    // A `set` inside a block is not metadata.
    let t = ChatTemplate::new("inner", "{% if x %}{% set tool_start = \"<a>\" %}{% endif %}").unwrap();
    assert_eq!(metadata::read(&t).unwrap(), Default::default());
}

fn run_sdk(cmd: Command, model: &str, mode: &str) -> String {
    let s = crate::common::server::spawn_on_any_port(cmd).expect("server did not come up");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/metadata_templates.py");
    let out = Command::new(crate::sdk::python()).arg(&path).arg(&s.base).arg(model).arg(mode).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "metadata_templates.py {mode} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ok errors"), "did not run to the end:\n{stdout}");
    stdout.into_owned()
}

fn serve(model: &str, template: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("serve").arg("--model").arg(crate::common::model(model)).arg("--chat-template").arg(example(template));
    cmd
}

/// SmolLM2 with each example template: schema-valid calls under `required` and a named
/// tool, streamed and not, through the OpenAI SDK (in `auto` it answers in text, or
/// calls validly).
#[test]
fn smollm2_calls_through_the_openai_sdk_with_each_example_template() {
    for (name, ..) in EXAMPLES {
        let stdout = run_sdk(serve(crate::common::SMOLLM2, name), "SmolLM2-135M-Instruct.Q4_1", "forced");
        println!("{name}:\n{stdout}");
    }
}

/// A real tool model served with the ChatML example instead of its own template calls
/// in `auto`: Qwen2.5-Coder-0.5B writes the OpenAI-shaped call the template shows
/// (fenced JSON, not `<tool_call>`), which call recovery reads whole.
#[test]
fn qwen_coder_calls_in_auto_with_the_chatml_example() {
    let model = crate::common::QWEN_CODER.trim_end_matches(".gguf");
    let stdout = run_sdk(serve(crate::common::QWEN_CODER, "chatml-tools.jinja"), model, "auto");
    println!("{stdout}");
}
