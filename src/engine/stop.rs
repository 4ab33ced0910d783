//! Stop-string matching over streamed text.
//!
//! Text is released only when no stop string could still begin inside it, so a
//! streaming client never sees part of a stop string.

/// Tracks generated text against a set of stop strings.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    text: String,
    released: usize,
    stopped: bool,
    /// Which stop string ended the text.
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            text: String::new(),
            released: 0,
            stopped: false,
            matched: None,
        }
    }

    /// Add a piece of text. Returns the text that may now be released and whether a
    /// stop string was found (then the text is cut before it and nothing more is
    /// accepted).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        let search_from = self.released;
        self.text.push_str(piece);
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(k, s)| {
                self.text[floor_char(&self.text, search_from.saturating_sub(s.len()))..]
                    .find(s.as_str())
                    .map(|i| (i + floor_char(&self.text, search_from.saturating_sub(s.len())), k))
            })
            .min();
        if let Some((at, k)) = hit {
            self.matched = Some(k);
            self.text.truncate(at);
            self.stopped = true;
            let out = self.text[self.released.min(at)..].to_string();
            self.released = self.text.len();
            return (out, true);
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            for l in (1..s.len().min(self.text.len() + 1)).rev() {
                if self.text.is_char_boundary(self.text.len() - l)
                    && s.is_char_boundary(l)
                    && self.text.ends_with(&s[..l])
                {
                    hold = hold.max(l);
                    break;
                }
            }
        }
        let until = self.text.len() - hold;
        let out = if until > self.released { self.text[self.released..until].to_string() } else { String::new() };
        self.released = self.released.max(until);
        (out, false)
    }

    /// Release whatever is held back (at the end of generation).
    pub fn flush(&mut self) -> String {
        let out = self.text[self.released..].to_string();
        self.released = self.text.len();
        out
    }

    /// The stop string that ended the text, once one did (the earliest in the text).
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|k| self.stops[k].as_str())
    }

    /// All text accepted so far (cut at the stop string, if one was found).
    pub fn text(&self) -> &str {
        &self.text
    }
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    #[test]
    fn push_example() {
        use crate::engine::stop::StopMatcher;
        let mut m = StopMatcher::new(&["END".to_string()]);
        assert_eq!(m.push("abc E"), ("abc ".to_string(), false));
        assert_eq!(m.push("NDx"), ("".to_string(), true));
        assert_eq!(m.text(), "abc ");
    }

    #[test]
    fn matched_example() {
        use crate::engine::stop::StopMatcher;
        let mut m = StopMatcher::new(&["END".to_string(), "\n\n".to_string()]);
        m.push("a\n\nb END");
        assert_eq!(m.matched(), Some("\n\n"));
    }
}
