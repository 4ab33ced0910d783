//! The constraint engine: JSON Schema → value grammar → dialect → regex → lazy DFA →
//! token masks.
//!
//! The modules form a one-way chain; each imports only modules before it:
//!
//! | module | stage |
//! |---|---|
//! | [`error`] | [`error::BuildError`]: why a grammar cannot be built, typed by kind (every stage returns it) |
//! | [`part`] | [`part::Built`]: a regex as text and as the steps that build it (no parsing back), automata as one part; regex-text helpers |
//! | [`rules`] | the rule and marker protocol: how a regex references shared parts and property sets (written here, read by `dfa`) |
//! | `nfa` | rules (built part trees, or text parsed) → one Thompson NFA, a pattern per rule |
//! | `dfa` | the lazy DFA over that NFA, following rule references as calls |
//! | `machine` | explicit automata (patterns with lengths, `multipleOf`, key sets) built on the DFA |
//! | [`ir`] | the value grammar ([`ir::Node`]), compile options and limits |
//! | `prune` | emptiness: the parts of a value grammar that admit no value, removed |
//! | [`dialect`] | how values are spelled: the [`regex::Dialect`] trait and JSON (the other spellings are the tools' argument dialects) |
//! | `ecma` | JSON Schema `pattern`s (ECMA-262) as regexes and automata |
//! | `numbers` | bounded integers and numbers, built-in string formats, as regex text |
//! | [`regex`] | the emitters: a [`ir::Node`] written as a regex (with shared rules) in a dialect |
//! | [`schema`] | the compiler: JSON Schema → [`ir::Node`] |
//! | [`vocab`], [`mask`] | the tokenizer's bytes as a trie; [`Grammar`] and [`Matcher`]: masks per token |
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolgate::grammar::{Grammar, TokenVocab};
//! use toolgate::grammar::regex::Json;
//! use toolgate::grammar::schema::Mode;
//! use toolgate::grammar::TokenMask;
//! # let tokenizer: toolgate::tokenizer::Tokenizer = unimplemented!();
//! let vocab = Arc::new(tokenizer.token_vocab());
//! let schema = serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
//! let grammar = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json)?);
//! let mut m = grammar.matcher(vocab.clone());
//! let mut mask = TokenMask::new(vocab.len());
//! m.fill_mask(&mut mask)?;         // tokens that can start `{"city":…}`
//! # Ok::<(), toolgate::Error>(())
//! ```

mod dfa;
pub mod dialect;
mod ecma;
pub mod error;
pub mod ir;
mod machine;
pub mod mask;
mod nfa;
mod numbers;
pub mod part;
mod prune;
pub mod regex;
pub mod rules;
pub mod schema;
pub mod spec;
pub mod token_mask;
pub mod vocab;

pub use mask::{Grammar, Matcher, TokenVocab};
pub use token_mask::TokenMask;
