//! Building tool declarations in Rust instead of JSON.
//!
//! ```
//! use toolgate::tools::definition::{Schema, ToolDefinition};
//!
//! let tool = ToolDefinition::new("get_weather")
//!     .description("Current weather for a city")
//!     .parameter("city", Schema::string().description("City name"))
//!     .parameter("unit", Schema::enumeration(["celsius", "fahrenheit"]))
//!     .required(["city"])
//!     .build();
//! assert_eq!(tool.function.parameters["required"][0], "city");
//! assert_eq!(tool.function.parameters["properties"]["unit"]["enum"][1], "fahrenheit");
//! ```

use serde_json::{json, Map, Value};

use super::{FunctionDef, Tool};

/// A JSON Schema for one parameter, built with the constructors below or taken as
/// JSON ([`Schema::from_json`]). Cheap to build; compiled only when a request uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(Value);

impl Schema {
    /// `{"type": "string"}`.
    pub fn string() -> Self {
        Self(json!({"type": "string"}))
    }

    /// `{"type": "integer"}`.
    pub fn integer() -> Self {
        Self(json!({"type": "integer"}))
    }

    /// `{"type": "number"}`.
    pub fn number() -> Self {
        Self(json!({"type": "number"}))
    }

    /// `{"type": "boolean"}`.
    pub fn boolean() -> Self {
        Self(json!({"type": "boolean"}))
    }

    /// `{"type": "array", "items": …}`.
    pub fn array(items: Schema) -> Self {
        Self(json!({"type": "array", "items": items.0}))
    }

    /// An object with these properties (all optional; see [`Schema::required`]).
    pub fn object<I, K>(properties: I) -> Self
    where
        I: IntoIterator<Item = (K, Schema)>,
        K: Into<String>,
    {
        let props: Map<String, Value> = properties.into_iter().map(|(k, v)| (k.into(), v.0)).collect();
        Self(json!({"type": "object", "properties": props}))
    }

    /// One of these strings.
    pub fn enumeration<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let v: Vec<Value> = values.into_iter().map(|s| Value::String(s.into())).collect();
        Self(json!({"type": "string", "enum": v}))
    }

    /// Any JSON Schema, as is.
    pub fn from_json(schema: Value) -> Self {
        Self(schema)
    }

    /// Add a `description` (models read it).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        if let Value::Object(m) = &mut self.0 {
            m.insert("description".into(), Value::String(text.into()));
        }
        self
    }

    /// For an object schema: these properties are required.
    pub fn required<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Value::Object(m) = &mut self.0 {
            m.insert("required".into(), names.into_iter().map(|s| Value::String(s.into())).collect());
        }
        self
    }

    /// The schema as JSON.
    pub fn into_json(self) -> Value {
        self.0
    }
}

/// Builder of a function tool: name, description, parameters, required ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    name: String,
    description: Option<String>,
    properties: Map<String, Value>,
    required: Vec<String>,
    strict: Option<bool>,
}

impl ToolDefinition {
    /// A tool called `name` with no parameters yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), description: None, properties: Map::new(), required: Vec::new(), strict: None }
    }

    /// What the tool does (the model reads it).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Add (or replace) a parameter.
    pub fn parameter(mut self, name: impl Into<String>, schema: Schema) -> Self {
        self.properties.insert(name.into(), schema.0);
        self
    }

    /// These parameters must be present.
    pub fn required<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.required = names.into_iter().map(Into::into).collect();
        self
    }

    /// `true`: a schema keyword the constraint engine cannot enforce is an error;
    /// `false` (the default): such keywords are ignored.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }

    /// The OpenAI tool.
    pub fn build(self) -> Tool {
        let mut parameters = json!({"type": "object", "properties": self.properties});
        if !self.required.is_empty() {
            parameters["required"] = json!(self.required);
        }
        Tool {
            kind: "function".into(),
            function: FunctionDef { name: self.name, description: self.description, parameters, strict: self.strict },
        }
    }
}

impl From<ToolDefinition> for Tool {
    fn from(d: ToolDefinition) -> Self {
        d.build()
    }
}
