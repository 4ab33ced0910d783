//! The integration suite, one test binary: every module below used to be its own
//! `tests/*.rs` target, and each of those linked the whole crate (candle, tokenizers,
//! axum…) again — twenty links of a 100 MB binary dominated CI's build. One binary
//! links once, and its tests share the test harness's thread pool.
//!
//! Run one area with a filter: `cargo test --release --test integration grammar::`.

mod common;

mod attention;
mod batching;
mod bench;
mod config;
mod conversation;
mod cuda_matvec;
mod fleet;
mod format_derivation;
mod fuzz;
mod generation;
mod grammar;
mod greedy_fixtures;
mod hardening;
mod hub;
mod recovery;
mod sampling;
mod schema_corpus;
mod sdk;
mod server;
mod stream_parser;
mod template_calls;
mod template_caps;
mod template_gate;
mod template_metadata;
mod template_render;
mod tiny_models;
mod tokenizer_fixtures;
mod tool_formats;
mod tools;
