//! The constraint engine: JSON Schema → value grammar → dialect → regex → lazy DFA →
//! token masks.
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolgate::grammar::{Grammar, TokenVocab};
//! use toolgate::grammar::regex::Json;
//! use toolgate::grammar::schema::Mode;
//! use toolgate::sampling::TokenMask;
//! # let tokenizer: toolgate::tokenizer::Tokenizer = unimplemented!();
//! let vocab = Arc::new(TokenVocab::from_tokenizer(&tokenizer));
//! let schema = serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
//! let grammar = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json)?);
//! let mut m = grammar.matcher(vocab.clone());
//! let mut mask = TokenMask::new(vocab.len());
//! m.fill_mask(&mut mask)?;         // tokens that can start `{"city":…}`
//! # Ok::<(), toolgate::Error>(())
//! ```

pub mod dfa;
pub mod machine;
pub mod mask;
pub mod regex;
pub mod rules;
pub mod schema;
pub mod vocab;

pub use mask::{Grammar, Matcher, TokenVocab};
