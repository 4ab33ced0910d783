//! Why a schema or regex cannot become a grammar: [`BuildError`], typed by its
//! [`BuildErrorKind`]. Every stage of the pipeline returns it; the schema compiler
//! turns it into [`crate::Error::Schema`] with the JSON pointer of the keyword at
//! fault ([`BuildError::at`]), so an embedder can tell a schema that is wrong from
//! one toolgate cannot enforce, or one that is too large, without reading messages.
//! Nothing here depends on another stage.
//!
//! ```
//! use toolgate::grammar::error::BuildErrorKind;
//! use toolgate::grammar::regex::Json;
//! use toolgate::grammar::schema::Mode;
//! use toolgate::grammar::Grammar;
//! let kind = |schema| match Grammar::from_schema(&schema, Mode::Strict, &Json) {
//!     Err(toolgate::Error::Schema { kind, .. }) => Some(kind),
//!     _ => None,
//! };
//! assert_eq!(kind(serde_json::json!({"type": "strin"})), Some(BuildErrorKind::Invalid));
//! assert_eq!(kind(serde_json::json!({"type": "array", "uniqueItems": true})), Some(BuildErrorKind::Unsupported));
//! assert_eq!(kind(serde_json::json!({"type": "integer", "minimum": 3, "maximum": 2})), Some(BuildErrorKind::Unsatisfiable));
//! assert_eq!(kind(serde_json::json!({"type": "string", "pattern": "(?<=a)b"})), Some(BuildErrorKind::Pattern));
//! ```

/// What kind of problem stops a grammar from being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BuildErrorKind {
    /// Not valid JSON Schema: a keyword of the wrong type, an unknown type name, a
    /// `$ref` that does not resolve.
    Invalid,
    /// Valid JSON Schema that toolgate cannot enforce exactly: a keyword, format or
    /// combination of keywords the grammar does not follow (lenient mode relaxes
    /// some of them).
    Unsupported,
    /// No value satisfies the schema (`minimum` above `maximum`, a required property
    /// whose schema is `false`, …).
    Unsatisfiable,
    /// The grammar would pass one of its limits: nesting depth, schema nodes,
    /// automaton states, NFA or grammar bytes.
    TooLarge,
    /// A `pattern` (or a regex the grammar was given) that toolgate cannot read: not
    /// a regex, or an ECMA-262 feature the grammar cannot follow (look-around,
    /// back-references).
    Pattern,
}

/// A grammar that cannot be built, and why.
///
/// Cost: a message allocation; made only on failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct BuildError {
    /// What kind of problem.
    pub kind: BuildErrorKind,
    /// What is wrong, for people.
    pub reason: String,
}

impl BuildError {
    /// A build error of `kind`.
    pub fn new(kind: BuildErrorKind, reason: impl Into<String>) -> Self {
        Self { kind, reason: reason.into() }
    }

    /// The build error inside a [`crate::Error::Schema`] (its pointer dropped: the
    /// caller puts it back with [`BuildError::at`]); any other error as
    /// [`BuildErrorKind::Invalid`] with its message.
    pub fn from_error(e: crate::Error) -> Self {
        match e {
            crate::Error::Schema { kind, reason, .. } => Self { kind, reason },
            e => Self::new(BuildErrorKind::Invalid, e.to_string()),
        }
    }

    /// This error as [`crate::Error::Schema`] at JSON pointer `pointer` (`#` for the
    /// whole schema).
    ///
    /// ```
    /// use toolgate::grammar::error::{BuildError, BuildErrorKind};
    /// let e = BuildError::new(BuildErrorKind::TooLarge, "too many states").at("#/properties/x");
    /// assert_eq!(e.to_string(), "schema at `#/properties/x`: too many states");
    /// ```
    pub fn at(self, pointer: &str) -> crate::Error {
        crate::Error::Schema { pointer: pointer.to_string(), kind: self.kind, reason: self.reason }
    }
}
