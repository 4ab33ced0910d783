//! Chat templates: an HF-compatible minijinja environment, rendering, the capability
//! prober and the load gate.
//!
//! The gate judges the template that will actually be used; see [`caps`] for how
//! capabilities are read off a template by running it.

pub mod bounds;
pub mod caps;
pub mod env;
pub mod family;
pub mod gate;
pub mod metadata;
pub mod probe;
pub mod render;
pub mod source;
pub mod transform;

pub use env::Clock;
pub use gate::{gate, inspect, ChatSetup, ToolFallback};
pub use render::{ChatTemplate, RenderRequest};
