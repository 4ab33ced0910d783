//! A two-step tool conversation with SmolLM2, embedded (no server):
//! the model calls a tool, the program runs it, the model answers with the result.
//!
//! ```sh
//! scripts/fetch-models
//! cargo run --release --example tool_conversation -- ~/.cache/toolgate/models/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```

use std::io::Write;

use toolgate::engine::conversation::ToolConversation;
use toolgate::engine::Engine;
use toolgate::model::DeviceChoice;
use toolgate::template::ToolFallback;
use toolgate::tools::definition::{Schema, ToolDefinition};
use toolgate::tools::stream::StreamEvent;
use toolgate::tools::ToolChoice;

/// The "tool": a fake weather service.
fn get_weather(args: &serde_json::Value) -> String {
    let city = args["city"].as_str().unwrap_or("?");
    serde_json::json!({"city": city, "temperature_c": 18, "sky": "sunny"}).to_string()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: tool_conversation MODEL.gguf")?;
    let mut engine = Engine::load(&path, DeviceChoice::Cpu)?;
    let weather = ToolDefinition::new("get_weather")
        .description("Current weather for a city")
        .parameter("city", Schema::string().description("City name"))
        .required(["city"]);
    // SmolLM2's own template cannot do tools: serve it with the generic tool template.
    let mut chat = ToolConversation::new(&engine, ToolFallback::Generic, vec![weather.into()])?;
    chat.params.max_tokens = 60;
    chat.parallel = false; // one call per turn
    chat.user("What's the weather like in Paris?");

    // Step 1: the model must call a tool; watch the call stream in.
    let turn = chat.respond_stream(&mut engine, &ToolChoice::Required, |e| {
        match e {
            StreamEvent::Content(t) => print!("{t}"),
            StreamEvent::CallStart { name, .. } => print!("→ {name}("),
            StreamEvent::Arguments { fragment, .. } => print!("{fragment}"),
            StreamEvent::Reasoning(r) => eprint!("{r}"),
        }
        let _ = std::io::stdout().flush();
    })?;
    println!(")");

    // Step 2: run each call and give the model the results.
    for call in &turn.tool_calls {
        let args: serde_json::Value = serde_json::from_str(&call.function.arguments)?;
        let result = get_weather(&args);
        println!("← {result}");
        chat.tool_result(&call.id, result);
    }
    let answer = chat.respond(&mut engine, &ToolChoice::None)?;
    println!("assistant: {}", answer.content);
    Ok(())
}
