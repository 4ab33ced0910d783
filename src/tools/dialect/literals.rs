//! The literal syntaxes models write arguments in besides JSON (Gemma 4's, Python's),
//! read into JSON values.

pub use crate::tools::format::GEMMA4_QUOTE as QUOTE;

fn leading_ws(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// The literal syntaxes models write arguments in besides JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Literals {
    /// Gemma 4: strings between two quote tokens (no escapes: [`QUOTE`], or the
    /// reader's own), bare or quoted keys, JSON's `true`/`false`/`null` and numbers.
    Gemma,
    /// Python: strings in `"` or `'` with the common escapes, quoted dict keys,
    /// `True`/`False`/`None`, numbers.
    Python,
}

/// A recursive-descent reader of one literal syntax into JSON values; nesting is
/// bounded (128 levels).
pub(super) struct LiteralReader<'a> {
    pub(super) s: &'a str,
    pub(super) i: usize,
    depth: usize,
    syntax: Literals,
    /// The string quote of [`Literals::Gemma`].
    quote: &'a str,
}

impl<'a> LiteralReader<'a> {
    pub(super) fn new(s: &'a str, syntax: Literals) -> Self {
        Self { s, i: 0, depth: 0, syntax, quote: QUOTE }
    }

    /// A reader of Gemma's syntax whose strings sit between `quote`s.
    pub(super) fn gemma(s: &'a str, quote: &'a str) -> Self {
        Self { quote, ..Self::new(s, Literals::Gemma) }
    }

    pub(super) fn ws(&mut self) {
        self.i += leading_ws(&self.s[self.i..]);
    }

    pub(super) fn eat(&mut self, t: &str) -> bool {
        self.ws();
        let hit = self.s[self.i..].starts_with(t);
        if hit {
            self.i += t.len();
        }
        hit
    }

    fn at_string(&self) -> bool {
        let rest = &self.s[self.i..];
        match self.syntax {
            Literals::Gemma => rest.starts_with(self.quote),
            Literals::Python => rest.starts_with('"') || rest.starts_with('\''),
        }
    }

    /// The string at the cursor (see [`Self::at_string`]).
    fn string(&mut self) -> Option<String> {
        if self.syntax == Literals::Gemma {
            self.i += self.quote.len();
            let len = self.s[self.i..].find(self.quote)?;
            let text = self.s[self.i..self.i + len].to_string();
            self.i += len + self.quote.len();
            return Some(text);
        }
        let quote = self.s[self.i..].chars().next()?;
        let mut out = String::new();
        let mut chars = self.s[self.i + 1..].char_indices();
        while let Some((j, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.i += 1 + j + 1;
                    return Some(out);
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| chars.next().map(|(_, h)| h)).collect();
                            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        other => out.push(other), // \\ \' \" and anything else literally
                    }
                }
                c => out.push(c),
            }
        }
        None
    }

    /// A dict key: a string, or (Gemma) a bare name.
    fn key(&mut self) -> Option<String> {
        self.ws();
        if self.at_string() {
            return self.string();
        }
        if self.syntax != Literals::Gemma {
            return None;
        }
        let k = &self.s[self.i..];
        let n = k.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).unwrap_or(k.len());
        if n == 0 {
            return None;
        }
        self.i += n;
        Some(k[..n].to_string())
    }

    pub(super) fn value(&mut self) -> Option<serde_json::Value> {
        use serde_json::Value;
        self.depth += 1;
        if self.depth > 128 {
            return None;
        }
        self.ws();
        let v = if self.at_string() {
            Value::String(self.string()?)
        } else if self.eat("{") {
            let mut map = serde_json::Map::new();
            if !self.eat("}") {
                loop {
                    let key = self.key()?;
                    if !self.eat(":") {
                        return None;
                    }
                    map.insert(key, self.value()?);
                    if self.eat("}") {
                        break;
                    }
                    if !self.eat(",") {
                        return None;
                    }
                }
            }
            Value::Object(map)
        } else if self.eat("[") {
            let mut items = Vec::new();
            if !self.eat("]") {
                loop {
                    items.push(self.value()?);
                    if self.eat("]") {
                        break;
                    }
                    if !self.eat(",") {
                        return None;
                    }
                }
            }
            Value::Array(items)
        } else {
            let rest = &self.s[self.i..];
            let n = rest
                .find(|c: char| matches!(c, ',' | ')' | ']' | '}' | ':') || c.is_whitespace())
                .unwrap_or(rest.len());
            let v = match (self.syntax, &rest[..n]) {
                (Literals::Python, "True") => Value::Bool(true),
                (Literals::Python, "False") => Value::Bool(false),
                (Literals::Python, "None") => Value::Null,
                (Literals::Gemma, "true") => Value::Bool(true),
                (Literals::Gemma, "false") => Value::Bool(false),
                (Literals::Gemma, "null") => Value::Null,
                (_, num) => match serde_json::from_str::<Value>(num).ok()? {
                    n @ Value::Number(_) => n,
                    _ => return None,
                },
            };
            self.i += n;
            v
        };
        self.depth -= 1;
        Some(v)
    }
}
