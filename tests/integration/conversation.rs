//! The embedding API on the real SmolLM2: a tool built with `ToolDefinition`, a
//! two-step `ToolConversation`, and the Hermes format on real weights (SmolLM2 with the
//! Qwen 2.5 chat template, which passes the gate natively).

use crate::common;

use serde_json::Value;
use toolgate::engine::chat::ToolMode;
use toolgate::engine::conversation::ToolConversation;
use toolgate::engine::Engine;
use toolgate::model::DeviceChoice;
use toolgate::template::source::{GgufTemplates, TemplateSource};
use toolgate::template::{gate, ToolFallback};
use toolgate::tools::definition::{Schema, ToolDefinition};
use toolgate::tools::ToolChoice;

fn weather() -> ToolDefinition {
    ToolDefinition::new("get_weather")
        .description("Current weather for a city")
        .parameter("city", Schema::string())
        .parameter("days", Schema::integer().description("Forecast length"))
        .required(["city", "days"])
}

fn check_call(call: &toolgate::tools::ToolCall) {
    assert_eq!(call.function.name, "get_weather");
    let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
    assert!(args["city"].is_string() && args["days"].is_i64(), "{args}");
    assert!(args.as_object().unwrap().keys().all(|k| k == "city" || k == "days"), "{args}");
}

#[test]
fn two_step_tool_conversation_keeps_history() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    // SmolLM2's own template cannot do tools: refused without a fallback.
    let err = ToolConversation::new(&engine, ToolFallback::None, vec![weather().into()]).unwrap_err();
    assert!(err.to_string().contains("does not support tool calling"), "{err}");

    let mut chat = ToolConversation::new(&engine, ToolFallback::Generic, vec![weather().into()]).unwrap();
    chat.params.max_tokens = 60;
    chat.system("You are a helpful assistant.").user("What's the weather in Paris for 3 days?");
    let turn = chat.respond(&mut engine, &ToolChoice::Required).unwrap();
    assert!(!turn.tool_calls.is_empty(), "{turn:?}");
    if turn.finish_reason == "tool_calls" {
        turn.tool_calls.iter().for_each(check_call);
    }
    let first = turn.tool_calls[0].clone();
    chat.tool_result(&first.id, r#"{"forecast": ["sun", "rain", "sun"]}"#);
    // The prompt of the second turn starts with the first one's: only the new part is
    // prefilled.
    let answer = chat.respond(&mut engine, &ToolChoice::None).unwrap();
    assert!(answer.tool_calls.is_empty());
    assert!(!answer.content.is_empty(), "{answer:?}");
    let roles: Vec<&str> = chat.messages().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert_eq!(chat.messages()[2]["tool_calls"][0]["id"], first.id.as_str());
}

#[test]
fn hermes_format_on_real_weights_with_the_qwen_template() {
    // `scripts/fetch-models` writes Qwen 2.5's template into SmolLM2's metadata: the
    // model passes the gate on its own template, no fallback, no override.
    let mut engine = Engine::load(common::model(common::SMOLLM2_QWEN), DeviceChoice::Cpu).unwrap();
    let templates = GgufTemplates::from_gguf(engine.gguf()).unwrap();
    let setup = gate("smollm2+qwen2.5", &templates, Some("llama"), None, ToolFallback::None).unwrap();
    assert_eq!(setup.source, TemplateSource::Gguf);
    assert_eq!(setup.family(), "hermes");
    assert!(setup.report.caps.tool_capable());
    for mode in [ToolMode::Constrained, ToolMode::Native] {
        let mut chat = ToolConversation::with_setup(setup.clone(), vec![weather().into()]);
        chat.params.max_tokens = 60;
        chat.parallel = false;
        chat.mode = mode;
        chat.user("What's the weather in Rome for the next 2 days?");
        let mut streamed = Vec::new();
        let turn = chat.respond_stream(&mut engine, &ToolChoice::Required, |e| streamed.push(e)).unwrap();
        if mode == ToolMode::Constrained {
            assert_eq!(turn.finish_reason, "tool_calls", "{turn:?}");
            assert_eq!(turn.tool_calls.len(), 1);
            check_call(&turn.tool_calls[0]);
        } else {
            // Native: whatever the model wrote, the parser lost nothing and invented nothing.
            assert!(turn.tool_calls.iter().all(|c| serde_json::from_str::<Value>(&c.function.arguments).is_ok()));
        }
        assert!(!streamed.is_empty());
    }
}

/// The one-shot front door: `Engine::chat` with a `ChatRequest`, and `chat_stream`,
/// whose deltas add up to the same turn.
#[test]
fn engine_chat_answers_a_request() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let request = toolgate::engine::chat::ChatRequest::user("What's the weather in Rome for the next 2 days?")
        .tools([weather()])
        .tool_choice(ToolChoice::Required)
        .fallback(ToolFallback::Generic)
        .max_tokens(60);
    let turn = engine.chat(&request).unwrap();
    assert_eq!(turn.finish_reason, "tool_calls", "{turn:?}");
    turn.tool_calls.iter().for_each(check_call);
    let mut names = Vec::new();
    let mut args = String::new();
    let streamed = engine
        .chat_stream(&request, |e| match e {
            toolgate::tools::stream::StreamEvent::CallStart { name, .. } => names.push(name),
            toolgate::tools::stream::StreamEvent::Arguments { index: 0, fragment } => args.push_str(&fragment),
            _ => {}
        })
        .unwrap();
    assert_eq!(streamed.tool_calls.len(), turn.tool_calls.len());
    assert_eq!(names[0], streamed.tool_calls[0].function.name);
    assert_eq!(args, streamed.tool_calls[0].function.arguments);
    // A model whose template cannot do tools is refused unless a fallback is named.
    let refused = engine.chat(&toolgate::engine::chat::ChatRequest::user("hi").tools([weather()])).unwrap_err();
    assert!(matches!(refused, toolgate::Error::NotToolCapable(_)), "{refused}");
}
