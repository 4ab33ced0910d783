//! # toolgate
//!
//! A pure-Rust inference engine for LLM tool calling. This crate runs GGUF-quantized
//! models on [candle](https://github.com/huggingface/candle) and is organised as a
//! one-way pipeline; each module owns one stage:
//!
//! | module | stage |
//! |---|---|
//! | [`gguf`] | read-only view of a GGUF file: metadata and tensors |
//! | [`tokenizer`] | GGUF vocabulary → [`tokenizers::Tokenizer`], special tokens, per-token bytes |
//! | [`model`] | architectures on candle behind the [`model::Model`] trait, KV cache, device choice |
//! | [`sampling`] | logits → next token: mask, penalties, temperature, top-k/top-p/min-p, seeded draw |
//! | [`template`] | the model's chat template: HF-compatible rendering, capability prober, the tool-calling gate |
//! | [`grammar`] | JSON Schema → regex → lazy DFA → per-token masks (the constraint engine) |
//! | [`engine`] | the generation loop: prompt → tokens → streamed text, stop conditions, prefix reuse; one chat turn; [`engine::conversation::ToolConversation`] |
//! | [`tools`] | OpenAI tool types and builders, family call formats, the calls grammar, the streaming call parser |
//! | [`server`] | OpenAI and Anthropic HTTP APIs on axum, metrics |
//! | [`bench`](mod@bench) | tool-calling reliability bench: BFCL tasks in constrained, native and prompt-only modes, BFCL's AST rules, table/JSON/SVG |
//! | [`hub`] | Hugging Face Hub: resolve, quant pick, header pre-check by range, verified resumable download, cache |
//!
//! ```no_run
//! use toolgate::engine::{Engine, GenerateParams};
//! use toolgate::model::DeviceChoice;
//!
//! let mut engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", DeviceChoice::Cpu)?;
//! let params = GenerateParams { max_tokens: 16, ..GenerateParams::default() };
//! let out = engine.generate_text("The capital of France is", &params, |piece| print!("{piece}"))?;
//! println!("\n{} tokens", out.completion_tokens);
//! # Ok::<(), toolgate::Error>(())
//! ```
#![warn(missing_docs)]

pub mod bench;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod grammar;
pub mod hub;
pub mod kernels;
pub mod model;
pub mod sampling;
pub mod server;
pub mod template;
pub mod tokenizer;
pub mod tools;

pub use error::{Error, Result};
