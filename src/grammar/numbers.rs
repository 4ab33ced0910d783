//! Regexes for numbers within bounds ([`int_range`], [`number_range`]) and for the
//! built-in string formats ([`format_regex`]): the emitters' arithmetic, written as
//! regex text digit by digit.

use super::ir::{Format, NumBound};
use super::part::NEVER;

/// The regex of a built-in format, over the string's characters (no character in it
/// needs a JSON escape).
pub fn format_regex(f: Format) -> String {
    // Days per month, and 29 February only in leap years (divisible by 4, and by
    // 400 when by 100).
    const DATE: &str = concat!(
        r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)",
        r"|02-(?:0[1-9]|1[0-9]|2[0-8]))",
        r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
    );
    const TIME: &str =
        r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    match f {
        Format::Date => DATE.into(),
        Format::Time => TIME.into(),
        Format::DateTime => format!("{DATE}T{TIME}"),
        Format::Uuid => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".into(),
        // A dot-atom local part of at most 64 characters, then a host name of letter-
        // or digit-edged labels (RFC 5321/1035): a subset of valid addresses, so every
        // generated one is valid.
        Format::Email => {
            const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
            format!(r"[A-Za-z0-9_%+-]{{1,32}}(?:\.[A-Za-z0-9_%+-]{{1,15}}){{0,2}}@(?:{LABEL}\.){{1,3}}[A-Za-z]{{2,24}}")
        }
        // RFC 3986 absolute URI: scheme, optional `//host[:port]`, path, query,
        // fragment, with `%` only before two hex digits (user info and IP literals
        // are left out).
        Format::Uri => {
            const PCHAR: &str = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
            const HOST: &str = r"(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*";
            format!(
                r"[A-Za-z][A-Za-z0-9+.-]*:(?://{HOST}(?::[0-9]*)?(?:/{PCHAR}*)*|/(?:{PCHAR}+(?:/{PCHAR}*)*)?|{PCHAR}+(?:/{PCHAR}*)*)?(?:\?(?:{PCHAR}|[/?])*)?(?:#(?:{PCHAR}|[/?])*)?"
            )
        }
        Format::Ipv4 => format!(r"{OCTET}\.{OCTET}\.{OCTET}\.{OCTET}"),
        // Letter- or digit-edged labels; 6 × 41 characters and 5 dots stay within
        // RFC 1123's 253.
        Format::Hostname => {
            const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,39}[A-Za-z0-9])?";
            format!(r"{LABEL}(?:\.{LABEL}){{0,5}}")
        }
    }
}

/// Regex for the decimal integers in `[min, max]` (either side open).
pub fn int_range(min: Option<i64>, max: Option<i64>) -> String {
    // At most 18 digits: every value fits an `i64`.
    const ANY_POS: &str = "(?:0|[1-9][0-9]{0,17})";
    const ANY_NEG: &str = "-[1-9][0-9]{0,17}";
    let cap = 10i64.pow(18) - 1;
    // Bounds past 18 digits: nothing beyond them, or only the values within reach.
    if min.is_some_and(|m| m > cap) || max.is_some_and(|m| m < -cap) {
        return NEVER.into();
    }
    let (min, max) = (min.map(|m| m.max(-cap)), max.map(|m| m.min(cap)));
    let mut alts = Vec::new();
    match (min, max) {
        (None, None) => return "(?:-?[1-9][0-9]{0,17}|0)".to_string(),
        (Some(lo), None) => {
            if lo <= 0 {
                alts.push(ANY_POS.to_string());
                if lo < 0 {
                    alts.push(format!("-(?:{})", nonneg_range(1, -lo)));
                }
            } else {
                alts.push(nonneg_range(lo, cap));
            }
        }
        (None, Some(hi)) => {
            if hi >= 0 {
                alts.push(ANY_NEG.to_string());
                alts.push(nonneg_range(0, hi));
            } else {
                alts.push(format!("-(?:{})", nonneg_range(-hi, cap)));
            }
        }
        (Some(lo), Some(hi)) => {
            if hi >= 0 {
                alts.push(nonneg_range(lo.max(0), hi));
            }
            if lo < 0 {
                let a = if hi < 0 { -hi } else { 1 };
                alts.push(format!("-(?:{})", nonneg_range(a, -lo)));
            }
        }
    }
    format!("(?:{})", alts.join("|"))
}

/// Regex for decimal numbers (no exponent) between decimal bounds.
///
/// A number is a sign, an integer part `I` and a fraction `f`. For `x = I.f ≥ 0` and a
/// bound `L = Li.Lf`: every `I` strictly between the bounds' integer parts takes any
/// fraction, and `I = Li` (or `I = Ui`) takes the fractions on the right side of
/// `Lf` (of `Uf`), compared digit by digit ([`fraction_range`]). A negative number
/// `-y` is bounded by the mirrored bounds on `y`. Cost: a few integer ranges and two
/// digit-wise comparisons, built in microseconds.
pub fn number_range(min: Option<NumBound>, max: Option<NumBound>) -> String {
    let mut alts = Vec::new();
    let positive = magnitude_range(min, max);
    if !positive.is_empty() {
        alts.push(positive);
    }
    // `-y` with `y` in the mirrored range; `-0` is zero, which the mirror handles.
    let negative = magnitude_range(max.map(NumBound::negated), min.map(NumBound::negated));
    if !negative.is_empty() {
        alts.push(format!("-(?:{negative})"));
    }
    if alts.is_empty() {
        return NEVER.to_string();
    }
    format!("(?:{})", alts.join("|"))
}

/// Regex for unsigned decimals `I.f` (`I` without leading zeros, at most 16 digits)
/// with `lo ⋚ I.f ⋚ hi`; empty when no such number exists.
fn magnitude_range(lo: Option<NumBound>, hi: Option<NumBound>) -> String {
    const CAP: i64 = 10i64.pow(16) - 1;
    const ANY_FRAC: &str = r"(?:\.[0-9]{1,16})?";
    if hi.is_some_and(|h| h.value < 0 || (h.value == 0 && h.frac == 0 && h.exclusive)) {
        return String::new();
    }
    // A lower bound below zero says nothing about a magnitude.
    let lo = lo.filter(|l| l.value >= 0);
    let (lo_digits, hi_digits) = (lo.map(NumBound::frac_digits), hi.map(NumBound::frac_digits));
    let lo_frac = lo.as_ref().zip(lo_digits.as_deref()).map(|(l, d)| (d, l.exclusive));
    let hi_frac = hi.as_ref().zip(hi_digits.as_deref()).map(|(h, d)| (d, h.exclusive));
    let mut parts = Vec::new();
    let full_lo = lo.map_or(0, |l| l.value.saturating_add(1));
    let full_hi = hi.map_or(CAP, |h| (h.value - 1).min(CAP));
    if full_lo <= full_hi {
        parts.push(format!("(?:{}){ANY_FRAC}", nonneg_range(full_lo, full_hi)));
    }
    match (lo, hi) {
        (Some(l), Some(h)) if l.value == h.value => {
            if let Some(f) = fraction_range(lo_frac, hi_frac) {
                parts.push(format!("{}{f}", l.value));
            }
        }
        _ => {
            if let Some(l) = lo.filter(|l| l.value <= CAP) {
                if let Some(f) = fraction_range(lo_frac, None) {
                    parts.push(format!("{}{f}", l.value));
                }
            }
            if let Some(h) = hi.filter(|h| h.value <= CAP && lo.is_none_or(|l| l.value < h.value)) {
                if let Some(f) = fraction_range(None, hi_frac) {
                    parts.push(format!("{}{f}", h.value));
                }
            }
        }
    }
    parts.join("|")
}

/// Regex for the fraction after an integer part (nothing, or `.` and 1–16 digits)
/// whose value `f` lies on the right side of `lo` and `hi`, each given as its digits
/// without trailing zeros (`""` is zero) and whether it is exclusive. `None` when no
/// fraction does.
fn fraction_range(lo: Option<(&str, bool)>, hi: Option<(&str, bool)>) -> Option<String> {
    const MAX_DIGITS: usize = 16;
    // Digit `i` of a bound (zeros past its end).
    let digit = |b: Option<(&str, bool)>, i: usize| b.map_or(0, |(d, _)| d.as_bytes().get(i).map_or(0, |c| c - b'0'));
    let exhausted = |b: Option<(&str, bool)>, i: usize| b.is_none_or(|(d, _)| i >= d.len());
    let strict = |b: Option<(&str, bool)>| b.is_some_and(|(_, s)| s);
    // The digits from position `i` on, `tight_lo`/`tight_hi` while equal to that bound so
    // far; `nonempty`: at least one digit.
    fn rest(
        i: usize,
        tl: bool,
        th: bool,
        nonempty: bool,
        ctx: &dyn Fn(usize) -> (u8, u8, bool, bool),
        strict: (bool, bool),
    ) -> Option<String> {
        let (lo_i, hi_i, lo_done, hi_done) = ctx(i);
        let n = usize::from(nonempty);
        let left = MAX_DIGITS.saturating_sub(i);
        // Both bounds used up (or loose): the remaining digits in closed form.
        if (!tl || lo_done) && (!th || hi_done) {
            return match (tl, th) {
                (false, false) => Some(format!("[0-9]{{{n},{left}}}")),
                (true, false) if !strict.0 => Some(format!("[0-9]{{{n},{left}}}")),
                (true, false) => {
                    Some(format!("0{{0,{}}}[1-9][0-9]{{0,{}}}", left.saturating_sub(1), left.saturating_sub(1)))
                }
                (false, true) | (true, true) if strict.1 || (tl && strict.0) => None,
                _ => Some(format!("0{{{n},{left}}}")),
            };
        }
        if left == 0 {
            return None;
        }
        let mut alts = Vec::new();
        // Ending here: the value is the digits so far, followed by zeros.
        let end_ok = (!tl || (lo_done && !strict.0)) && (!th || !hi_done || !strict.1);
        if end_ok && !nonempty {
            alts.push(String::new());
        }
        let (a, b) = (if tl { lo_i } else { 0 }, if th { hi_i } else { 9 });
        if a > b {
            return (!alts.is_empty()).then(|| alts.concat());
        }
        // Digits strictly inside the window leave both bounds behind.
        let (inner_lo, inner_hi) = (a + u8::from(tl), b.saturating_sub(u8::from(th)));
        if inner_lo <= inner_hi && !(th && b == 0) {
            alts.push(format!("[{inner_lo}-{inner_hi}][0-9]{{0,{}}}", left - 1));
        }
        if tl {
            if let Some(r) = rest(i + 1, true, th && a == b, false, ctx, strict) {
                alts.push(format!("{a}{r}"));
            }
        }
        if th && !(tl && a == b) {
            if let Some(r) = rest(i + 1, false, true, false, ctx, strict) {
                alts.push(format!("{b}{r}"));
            }
        }
        (!alts.is_empty()).then(|| format!("(?:{})", alts.join("|")))
    }
    let ctx = |i: usize| (digit(lo, i), digit(hi, i), exhausted(lo, i), exhausted(hi, i));
    let strict_pair = (strict(lo), strict(hi));
    let (tl, th) = (lo.is_some(), hi.is_some());
    let digits = rest(0, tl, th, true, &ctx, strict_pair);
    // No fraction at all: the value zero.
    let zero_ok = (!tl || (exhausted(lo, 0) && !strict_pair.0)) && (!th || !exhausted(hi, 0) || !strict_pair.1);
    match (digits, zero_ok) {
        (Some(d), true) => Some(format!("(?:\\.{d})?")),
        (Some(d), false) => Some(format!("\\.{d}")),
        (None, true) => Some(String::new()),
        (None, false) => None,
    }
}

/// Regex for integers in `[lo, hi]`, `0 <= lo <= hi`, without leading zeros.
fn nonneg_range(lo: i64, hi: i64) -> String {
    let mut parts = Vec::new();
    let (lo_len, hi_len) = (lo.to_string().len(), hi.to_string().len());
    for len in lo_len..=hi_len {
        let floor = if len == 1 { 0 } else { 10i64.pow(len as u32 - 1) };
        let ceil = 10i64.pow(len as u32) - 1;
        let (a, b) = (lo.max(floor), hi.min(ceil));
        if a <= b {
            parts.push(same_len(&a.to_string(), &b.to_string()));
        }
    }
    parts.join("|")
}

/// Regex for the numbers between two digit strings of equal length.
fn same_len(a: &str, b: &str) -> String {
    let (a0, b0) = (a.as_bytes()[0] - b'0', b.as_bytes()[0] - b'0');
    let n = a.len() - 1;
    if n == 0 {
        return if a0 == b0 { a.to_string() } else { format!("[{a0}-{b0}]") };
    }
    let (ar, br) = (&a[1..], &b[1..]);
    if a0 == b0 {
        return format!("{a0}(?:{})", same_len(ar, br));
    }
    let (zeros, nines) = ("0".repeat(n), "9".repeat(n));
    if ar == zeros && br == nines {
        return format!("[{a0}-{b0}][0-9]{{{n}}}");
    }
    let mut parts = vec![format!("{a0}(?:{})", same_len(ar, &nines))];
    if a0 + 1 < b0 {
        parts.push(format!("[{}-{}][0-9]{{{n}}}", a0 + 1, b0 - 1));
    }
    parts.push(format!("{b0}(?:{})", same_len(&zeros, br)));
    parts.join("|")
}

#[cfg(test)]
mod tests {
    #[test]
    fn int_range_example() {
        use crate::grammar::regex::int_range;
        let re = regex_automata::meta::Regex::new(&format!("^(?:{})$", int_range(Some(-5), Some(120)))).unwrap();
        for i in -5..=120 {
            assert!(re.is_match(&i.to_string()));
        }
        for s in ["-6", "121", "007", "-0", "1000"] {
            assert!(!re.is_match(s));
        }
    }

    #[test]
    fn number_range_example() {
        use crate::grammar::regex::number_range;
        use crate::grammar::schema::NumBound;
        let range = |lo: f64, hi: f64| {
            let re = number_range(NumBound::new(lo, true), NumBound::new(hi, false));
            regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap()
        };
        let re = range(0.0, 1.0);
        assert!(re.is_match("0.5") && re.is_match("1") && re.is_match("1.000"));
        assert!(!re.is_match("0") && !re.is_match("-0.0") && !re.is_match("1.01"));
        let re = range(-0.25, 2.5);
        assert!(re.is_match("-0.2") && re.is_match("-0.2499") && re.is_match("2.50") && re.is_match("0"));
        assert!(!re.is_match("-0.25") && !re.is_match("-0.3") && !re.is_match("2.51") && !re.is_match("3"));
    }
}
