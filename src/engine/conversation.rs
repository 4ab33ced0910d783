//! A tool-calling conversation that keeps its history: the crate's front door for
//! agents embedding toolgate.
//!
//! ```no_run
//! use toolgate::engine::conversation::ToolConversation;
//! use toolgate::engine::Engine;
//! use toolgate::model::DeviceChoice;
//! use toolgate::template::ToolFallback;
//! use toolgate::tools::definition::{Schema, ToolDefinition};
//! use toolgate::tools::ToolChoice;
//!
//! let mut engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", DeviceChoice::Cpu)?;
//! let weather = ToolDefinition::new("get_weather").parameter("city", Schema::string()).required(["city"]);
//! let mut chat = ToolConversation::new(&engine, ToolFallback::Generic, vec![weather.into()])?;
//! chat.user("What's the weather in Paris?");
//! let turn = chat.respond(&mut engine, &ToolChoice::Required)?;
//! for call in &turn.tool_calls {
//!     chat.tool_result(&call.id, r#"{"temp_c": 18}"#); // run the tool, feed the result back
//! }
//! let answer = chat.respond(&mut engine, &ToolChoice::None)?;
//! println!("{}", answer.content);
//! # Ok::<(), toolgate::Error>(())
//! ```

use serde_json::{json, Value};

use super::chat::{prepare_turn, ChatTurn, ToolMode};
use super::{Engine, GenerateParams};
use crate::template::{ChatSetup, ToolFallback};
use crate::tools::stream::StreamEvent;
use crate::tools::{Tool, ToolChoice};
use crate::Result;

/// A conversation with tools: the model's gated chat setup, the declared tools, the
/// messages so far, and the generation settings.
#[derive(Debug)]
pub struct ToolConversation {
    setup: ChatSetup,
    tools: Vec<Tool>,
    messages: Vec<Value>,
    /// Constrained (default) or native tool calls.
    pub mode: ToolMode,
    /// Allow several calls per turn (default `true`).
    pub parallel: bool,
    /// Sampling, `max_tokens`, stop strings (default: greedy, 256 tokens).
    pub params: GenerateParams,
}

impl ToolConversation {
    /// Start a conversation on `engine`'s model: its chat template goes through the
    /// tool-calling gate (`fallback` decides what happens to a template that cannot do
    /// tools).
    ///
    /// # Errors
    /// [`crate::Error::NotToolCapable`] when the template cannot do tools and
    /// `fallback` is [`ToolFallback::None`]; template errors.
    pub fn new(engine: &Engine, fallback: ToolFallback, tools: Vec<Tool>) -> Result<Self> {
        Ok(Self::with_setup(engine.chat_setup(fallback)?, tools))
    }

    /// Start a conversation with a chat setup already gated (e.g. with a template
    /// override).
    pub fn with_setup(setup: ChatSetup, tools: Vec<Tool>) -> Self {
        let params =
            GenerateParams { sampling: crate::sampling::SamplingParams::greedy(), ..GenerateParams::default() };
        Self { setup, tools, messages: Vec::new(), mode: ToolMode::Constrained, parallel: true, params }
    }

    /// Add a system message.
    pub fn system(&mut self, text: impl Into<String>) -> &mut Self {
        self.messages.push(json!({"role": "system", "content": text.into()}));
        self
    }

    /// Add a user message.
    pub fn user(&mut self, text: impl Into<String>) -> &mut Self {
        self.messages.push(json!({"role": "user", "content": text.into()}));
        self
    }

    /// Add the result of the call `call_id` (from the last turn's `tool_calls`).
    pub fn tool_result(&mut self, call_id: &str, content: impl Into<String>) -> &mut Self {
        self.messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": content.into()}));
        self
    }

    /// The messages so far, OpenAI-shaped.
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// The gated chat setup (template, capabilities, tool-call family).
    pub fn setup(&self) -> &ChatSetup {
        &self.setup
    }

    /// Generate the assistant's next turn and append it to the history.
    ///
    /// Cost: one render and one generation; the cached prefix of the previous turn is
    /// reused, so only the new messages are prefilled.
    ///
    /// # Errors
    /// As [`prepare_turn`] and [`super::chat::PreparedTurn::run`].
    pub fn respond(&mut self, engine: &mut Engine, choice: &ToolChoice) -> Result<ChatTurn> {
        self.respond_stream(engine, choice, |_| {})
    }

    /// [`Self::respond`], calling `on_event` with each delta as it is generated.
    ///
    /// # Errors
    /// As [`Self::respond`].
    pub fn respond_stream(
        &mut self,
        engine: &mut Engine,
        choice: &ToolChoice,
        on_event: impl FnMut(StreamEvent),
    ) -> Result<ChatTurn> {
        let turn =
            prepare_turn(engine, &self.setup, self.messages.clone(), &self.tools, choice, self.parallel, self.mode)?
                .run(engine, &self.params, on_event)?;
        let mut msg = json!({"role": "assistant", "content": turn.content});
        if !turn.tool_calls.is_empty() {
            msg["tool_calls"] = serde_json::to_value(&turn.tool_calls).unwrap_or(Value::Null);
        }
        self.messages.push(msg);
        Ok(turn)
    }
}
