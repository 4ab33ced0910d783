//! What the schema document says, before any grammar: which keywords assert and which
//! are annotations, the standard formats, the types untyped keywords imply, `allOf`
//! merging and the draft-7 reading of `$ref` siblings. Plain functions on
//! `serde_json` values; no part of the grammar.

use serde_json::{Map, Value};

/// The keywords that constrain an instance (draft 4 to 2020-12), `$ref` aside. Every
/// other keyword is an annotation (`description`, `default`, `x-…`, vendor keys), as
/// JSON Schema says of unknown keywords: ignored beside `$ref` and when `allOf`
/// branches disagree on it.
pub(super) const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "$dynamicRef",
    "$recursiveRef",
];

pub(super) fn is_annotation(keyword: &str) -> bool {
    !ASSERTIONS.contains(&keyword) && keyword != "$ref"
}

/// The string formats draft 2020-12 defines (§7.3); `format` names outside this list
/// are annotations only.
pub(super) const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Drafts 3 to 7 (a root `$schema` naming one) ignore the keywords beside a `$ref`;
/// later drafts apply them. For the older drafts the schema is read with those
/// siblings dropped (annotations and definitions stay), before any merge could make
/// new ones. Cost: one copy of the schema, for those drafts only.
pub(super) fn without_ref_siblings(schema: &Value) -> std::borrow::Cow<'_, Value> {
    pub(super) fn strip(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .filter(|(k, _)| !o.get("$ref").is_some_and(Value::is_string) || *k == "$ref" || is_annotation(k))
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let draft = schema.get("$schema").and_then(Value::as_str).unwrap_or("");
    if ["draft-03", "draft-04", "draft-06", "draft-07"].iter().any(|d| draft.contains(d)) {
        std::borrow::Cow::Owned(strip(schema))
    } else {
        std::borrow::Cow::Borrowed(schema)
    }
}

/// The types `obj`'s keywords apply to, for a schema without `type` (`properties` →
/// object, `items` → array, `pattern` → string, `minimum` → number).
pub(super) fn infer_types(obj: &Map<String, Value>) -> Vec<&'static str> {
    const BY_TYPE: [(&str, &[&str]); 4] = [
        (
            "object",
            &[
                "properties",
                "required",
                "additionalProperties",
                "patternProperties",
                "minProperties",
                "maxProperties",
                "propertyNames",
                "dependencies",
                "dependentRequired",
                "dependentSchemas",
            ],
        ),
        ("array", &["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"]),
        ("number", &["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]),
        ("string", &["pattern", "minLength", "maxLength", "format"]),
    ];
    BY_TYPE.iter().filter(|(_, keys)| keys.iter().any(|k| obj.contains_key(*k))).map(|(t, _)| *t).collect()
}

pub(super) fn merge_objects(a: &Map<String, Value>, b: &Value) -> Option<Value> {
    let b = b.as_object()?;
    // A side closed by `additionalProperties: false` sees only its own
    // `properties`: names the other side adds would be invalid there, which a
    // union of the two lists would not say.
    let names = |m: &Map<String, Value>| -> Vec<String> {
        m.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect()).unwrap_or_default()
    };
    let closed = |m: &Map<String, Value>| m.get("additionalProperties") == Some(&Value::Bool(false));
    let (na, nb) = (names(a), names(b));
    if closed(a) && nb.iter().any(|n| !na.contains(n)) || closed(b) && na.iter().any(|n| !nb.contains(n)) {
        return None;
    }
    let mut out = a.clone();
    for (k, v) in b {
        match (k.as_str(), out.get(k)) {
            ("properties", Some(Value::Object(pa))) => {
                // A property both sides declare must satisfy both schemas: merge
                // them (the later one alone would drop the earlier's constraints).
                let mut p = pa.clone();
                for (pk, pv) in v.as_object()? {
                    let both = match p.get(pk) {
                        None | Some(Value::Bool(true)) => pv.clone(),
                        Some(existing) if existing == pv || pv == &Value::Bool(true) => existing.clone(),
                        Some(Value::Object(existing)) => merge_objects(existing, pv)?,
                        Some(_) => return None,
                    };
                    p.insert(pk.clone(), both);
                }
                out.insert(k.clone(), Value::Object(p));
            }
            ("required", Some(Value::Array(ra))) => {
                let mut r = ra.clone();
                for x in v.as_array()? {
                    if !r.contains(x) {
                        r.push(x.clone());
                    }
                }
                out.insert(k.clone(), Value::Array(r));
            }
            (_, Some(existing)) if existing != v && !is_annotation(k) => return None,
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(Value::Object(out))
}

/// Whether `v` is of JSON Schema type `t`.
pub(super) fn value_has_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}
