//! Memory bounds for untrusted templates: what one render may build.
//!
//! Fuel bounds the steps of a render, not the size of what each step builds: `s ~ s`
//! doubles a string in one instruction, `'x' * 100000000` is one constant, and
//! `big|replace('x', big)` squares one. So every operation that can build a value
//! larger than its operands is checked before it builds:
//!
//! - The operators `~`, `+` and `*` are rewritten, in the template's syntax tree, into
//!   calls of checked functions ([`rewrite`]; `a ~ b` → `__concat(a, b)`).
//!   Strings are joined or repeated by them (as minijinja does); other operands go to
//!   minijinja's own operator.
//! - The filters and Python string methods whose output can outgrow their input
//!   (`replace`, `join`, `indent`, `format`) estimate their output first.
//! - Every value printed, into the output or into a captured block, is counted; the
//!   literal text of a captured block (`{% set x %}…{% endset %}`, a macro's body,
//!   `{% filter %}`) is printed as a value for that (the output itself is bounded by
//!   its writer).
//!
//! Each such value is at most [`MAX_VALUE_BYTES`], and all of them together in one
//! render at most [`MAX_BUILT_BYTES`]; past either the render fails with a template
//! error.

use std::borrow::Cow;
use std::cell::Cell;

use minijinja::machinery::ast;
use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{context, Environment, Error as JinjaError, ErrorKind, State, Value};

/// The most a render may write: 16 MiB, four times the largest request body (a
/// prompt longer than that cannot fit any context window toolgate serves).
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;
/// The largest value one operation may build: 16 MiB, as the render's output limit.
pub const MAX_VALUE_BYTES: usize = MAX_OUTPUT_BYTES;
/// The bytes all checked operations of one render may build together (strings joined,
/// repeated, replaced, printed): 256 MiB. A real chat template builds a few times its
/// output.
pub const MAX_BUILT_BYTES: usize = 256 << 20;
/// What one list item is counted as when lists are concatenated (a value's size).
const LIST_ITEM_BYTES: usize = 16;
/// Expressions nested deeper than this are refused when the template is parsed.
pub const MAX_EXPR_DEPTH: usize = 256;

thread_local! {
    /// Bytes built so far by the render running on this thread.
    static BUILT: Cell<usize> = const { Cell::new(0) };
}

/// Start counting a render's bytes (a render runs on one thread from start to end).
pub(crate) fn begin_render() {
    BUILT.with(|b| b.set(0));
}

/// Count `bytes` about to be built; an error past [`MAX_VALUE_BYTES`] for one value or
/// [`MAX_BUILT_BYTES`] for the render.
pub(crate) fn charge(bytes: usize) -> Result<(), JinjaError> {
    if bytes > MAX_VALUE_BYTES {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("a value of {bytes} bytes would pass the {} MiB limit on one value", MAX_VALUE_BYTES >> 20),
        ));
    }
    BUILT.with(|b| {
        let total = b.get().saturating_add(bytes);
        b.set(total);
        if total > MAX_BUILT_BYTES {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("the render built more than {} MiB (strings, lists, printed values)", MAX_BUILT_BYTES >> 20),
            ));
        }
        Ok(())
    })
}

/// An upper bound on the bytes `v` displays as (strings, and the strings inside
/// lists and maps), saturating; stops counting past [`MAX_BUILT_BYTES`].
fn deep_len(v: &Value) -> usize {
    fn walk(v: &Value, depth: usize, acc: &mut usize) {
        if *acc > MAX_BUILT_BYTES || depth > 64 {
            *acc = acc.saturating_add(MAX_BUILT_BYTES);
            return;
        }
        match v.kind() {
            ValueKind::String => *acc = acc.saturating_add(v.as_str().map_or(0, str::len)),
            ValueKind::Seq | ValueKind::Iterable | ValueKind::Map => {
                let Ok(items) = v.try_iter() else { return };
                for item in items {
                    *acc = acc.saturating_add(4);
                    if v.kind() == ValueKind::Map {
                        walk(&v.get_item(&item).unwrap_or_default(), depth + 1, acc);
                    }
                    walk(&item, depth + 1, acc);
                }
            }
            _ => *acc = acc.saturating_add(24),
        }
    }
    let mut acc = 0;
    walk(v, 0, &mut acc);
    acc
}

/// `v` as `~` shows it, after counting its size.
fn shown(v: &Value) -> Cow<'_, str> {
    match v.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(v.to_string()),
    }
}

/// minijinja's own `a OP b`, for operands the checked functions do not build.
/// Numbers are computed here as minijinja does (integers exactly, falling back on
/// overflow; a float on either side makes a float), the rest by minijinja itself.
fn native(state: &State, op: char, a: Value, b: Value) -> Result<Value, JinjaError> {
    if a.is_integer() && b.is_integer() {
        if let (Ok(x), Ok(y)) = (i64::try_from(a.clone()), i64::try_from(b.clone())) {
            let r = if op == '+' { x.checked_add(y) } else { x.checked_mul(y) };
            if let Some(r) = r {
                return Ok(Value::from(r));
            }
        }
    } else if a.is_number() && b.is_number() {
        if let (Ok(x), Ok(y)) = (f64::try_from(a.clone()), f64::try_from(b.clone())) {
            return Ok(Value::from(if op == '+' { x + y } else { x * y }));
        }
    }
    let source = format!("a {op} b");
    let expr = state.env().compile_expression(&source)?;
    // Without the expression's own location, so the error points into the template.
    expr.eval(context! {a => a, b => b})
        .map_err(|e| JinjaError::new(e.kind(), e.detail().unwrap_or_default().to_string()))
}

/// `a ~ b`.
fn concat(a: Value, b: Value) -> Result<Value, JinjaError> {
    charge(deep_len(&a).saturating_add(deep_len(&b)))?;
    Ok(Value::from([shown(&a), shown(&b)].concat()))
}

/// `a + b`.
fn add(state: &State, a: Value, b: Value) -> Result<Value, JinjaError> {
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        charge(x.len() + y.len())?;
        return Ok(Value::from([x, y].concat()));
    }
    let seq = |v: &Value| matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable);
    if seq(&a) && seq(&b) {
        // The right operand's contents, and the list the two become (minijinja copies
        // a chain of concatenations into one list now and then: a template appending
        // in a loop costs time quadratic in the items).
        let items = a.len().unwrap_or(0).saturating_add(b.len().unwrap_or(0));
        charge(deep_len(&b).saturating_add(items.saturating_mul(LIST_ITEM_BYTES)))?;
    }
    native(state, '+', a, b)
}

/// `a * b`.
fn mul(state: &State, a: Value, b: Value) -> Result<Value, JinjaError> {
    let repeated = |v: &Value, n: &Value| {
        let n = n.as_usize()?;
        Some(if v.kind() == ValueKind::String { v.as_str().map_or(0, str::len) } else { deep_len(v) }.saturating_mul(n))
    };
    let textual = |v: &Value| matches!(v.kind(), ValueKind::String | ValueKind::Seq | ValueKind::Iterable);
    let size = match (textual(&a), textual(&b)) {
        (true, false) => repeated(&a, &b),
        (false, true) => repeated(&b, &a),
        _ => None,
    };
    if let Some(size) = size {
        charge(size)?;
    }
    native(state, '*', a, b)
}

/// Bytes `s.replace(old, new)` can take at most.
fn replaced_len(s: usize, old: usize, new: usize) -> usize {
    s.saturating_add((s / old.max(1)).saturating_add(1).saturating_mul(new))
}

/// An upper bound on a format string's output: its text, each numeric width it
/// spells, and every argument once per placeholder.
fn formatted_len(fmt: &str, args: &[Value]) -> usize {
    let placeholders = fmt.matches(['%', '{']).count().saturating_add(1);
    let widths = fmt
        .split(|c: char| !c.is_ascii_digit())
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().unwrap_or(usize::MAX))
        .fold(0usize, usize::saturating_add);
    let args = args.iter().map(deep_len).fold(0usize, usize::saturating_add);
    fmt.len().saturating_add(widths).saturating_add(placeholders.saturating_mul(args))
}

/// An upper bound on `items` joined with a separator of `sep` bytes.
fn joined_len(items: &Value, sep: usize) -> usize {
    let n = items.len().unwrap_or(0);
    deep_len(items).saturating_add(n.saturating_mul(sep))
}

fn str_len(v: Option<&Value>) -> usize {
    v.map_or(0, |v| shown(v).len())
}

/// The output a size-amplifying filter can reach, from its arguments (the piped value
/// first; keyword arguments last, as a map).
fn filter_estimate(name: &str, args: &[Value]) -> usize {
    let arg = |i: usize| args.get(i).filter(|v| !v.is_kwargs());
    let kwarg = |k: &str| args.last().filter(|v| v.is_kwargs()).and_then(|m| m.get_attr(k).ok());
    match name {
        "replace" => replaced_len(str_len(arg(0)), str_len(arg(1)), str_len(arg(2))),
        "join" => args.first().map_or(0, |v| joined_len(v, str_len(arg(1)))),
        "indent" => {
            let s = str_len(arg(0));
            let width = arg(1).cloned().or_else(|| kwarg("width").filter(|w| !w.is_undefined()));
            let width = width.map_or(4, |w| w.as_str().map_or_else(|| w.as_usize().unwrap_or(usize::MAX), str::len));
            let lines = args.first().and_then(|v| v.as_str()).map_or(1, |s| s.lines().count() + 1);
            s.saturating_add(lines.saturating_mul(width))
        }
        "format" => formatted_len(args.first().and_then(|v| v.as_str()).unwrap_or(""), args.get(1..).unwrap_or(&[])),
        _ => 0,
    }
}

/// Install the checked operators, filters and string methods into `env` (its
/// unknown-method callback is wrapped: set it first).
pub(crate) fn install(env: &mut Environment<'static>) {
    env.add_function("__concat", concat);
    env.add_function("__add", add);
    env.add_function("__mul", mul);
    let builtins = [
        ("replace", Value::from_function(minijinja::filters::replace)),
        ("join", Value::from_function(minijinja::filters::join)),
        ("indent", Value::from_function(minijinja::filters::indent)),
        ("format", Value::from_function(minijinja::filters::format)),
    ];
    for (name, builtin) in builtins {
        env.add_filter(name, move |state: &mut State, args: Rest<ValueOrKwargs>| -> Result<Value, JinjaError> {
            let args = args.into_values();
            charge(filter_estimate(name, &args))?;
            builtin.call(state, &args)
        });
    }
    env.set_unknown_method_callback(|state, value, method, args| {
        if let Some(s) = value.as_str() {
            let size = match method {
                "replace" => replaced_len(s.len(), str_len(args.first()), str_len(args.get(1))),
                "join" => args.first().map_or(0, |v| joined_len(v, s.len())),
                "format" => formatted_len(s, args),
                _ => 0,
            };
            charge(size)?;
        }
        minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
    });
}

/// What is rewritten at a [`Site`].
enum Rewrite {
    /// A checked operator: the function that replaces it.
    Operator(&'static str),
    /// Literal text in a captured block: printed from `__literals` (by its index), so
    /// it is counted as a printed value.
    Literal(usize),
}

/// Where something is rewritten in the source: the whole expression or text, and an
/// operator's operands.
struct Site {
    whole: (usize, usize),
    left: (usize, usize),
    right: (usize, usize),
    rewrite: Rewrite,
}

/// Collects [`Site`]s from the syntax tree, computing each expression's extent in the
/// source (a node's own span can be narrower: a filter's starts at its name).
struct Sites<'s> {
    source: &'s str,
    sites: Vec<Site>,
    literals: Vec<String>,
    /// Inside a block whose output is captured (`{% set x %}`, a macro, `{% filter %}`).
    captured: usize,
}

type Extent = (usize, usize);

fn span(s: minijinja::machinery::Span) -> Extent {
    (s.start_offset as usize, s.end_offset as usize)
}

fn union(a: Extent, b: Extent) -> Extent {
    (a.0.min(b.0), a.1.max(b.1))
}

impl Sites<'_> {
    /// Literal text inside a captured block: the text between the tags around it
    /// (the whitespace the lexer trimmed included, so rewriting it trims nothing
    /// else), unless it is the body of a `{% raw %}` block.
    fn literal(&mut self, raw: &ast::Spanned<ast::EmitRaw<'_>>) {
        let (start, end) = span(raw.span());
        let before = self.source[..start].trim_end();
        let after = self.source[end..].trim_start();
        let (gap_start, gap_end) = (before.len(), self.source.len() - after.len());
        let opened_by_tag = before.is_empty() || before.ends_with('}');
        let closed_by_tag = after.is_empty() || after.starts_with('{');
        let raw_block = before.rfind("{%").is_some_and(|t| {
            before[t + 2..before.len().saturating_sub(2)]
                .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace())
                == "raw"
        });
        if opened_by_tag && closed_by_tag && !raw_block {
            let index = self.literals.len();
            self.literals.push(raw.raw.to_string());
            let whole = (gap_start, gap_end);
            self.sites.push(Site { whole, left: whole, right: whole, rewrite: Rewrite::Literal(index) });
        }
    }

    /// The statements of a block whose output is captured.
    fn captured(&mut self, stmts: &[ast::Stmt<'_>], depth: usize) -> Result<(), String> {
        self.captured += 1;
        let r = self.stmts(stmts, depth);
        self.captured -= 1;
        r
    }

    fn stmts(&mut self, stmts: &[ast::Stmt<'_>], depth: usize) -> Result<(), String> {
        stmts.iter().try_for_each(|s| self.stmt(s, depth))
    }

    fn stmt(&mut self, s: &ast::Stmt<'_>, depth: usize) -> Result<(), String> {
        use ast::Stmt;
        if depth > MAX_EXPR_DEPTH {
            return Err(format!("blocks nest deeper than {MAX_EXPR_DEPTH} levels"));
        }
        let d = depth + 1;
        match s {
            Stmt::Template(t) => self.stmts(&t.children, d),
            Stmt::EmitExpr(e) => self.expr(&e.expr, d).map(drop),
            Stmt::EmitRaw(r) => {
                if self.captured > 0 {
                    self.literal(r);
                }
                Ok(())
            }
            Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
            Stmt::ForLoop(f) => {
                self.expr(&f.target, d)?;
                self.expr(&f.iter, d)?;
                if let Some(e) = &f.filter_expr {
                    self.expr(e, d)?;
                }
                self.stmts(&f.body, d)?;
                self.stmts(&f.else_body, d)
            }
            Stmt::IfCond(i) => {
                self.expr(&i.expr, d)?;
                self.stmts(&i.true_body, d)?;
                self.stmts(&i.false_body, d)
            }
            Stmt::WithBlock(w) => {
                for (a, b) in &w.assignments {
                    self.expr(a, d)?;
                    self.expr(b, d)?;
                }
                self.stmts(&w.body, d)
            }
            Stmt::Set(x) => {
                self.expr(&x.target, d)?;
                self.expr(&x.expr, d).map(drop)
            }
            Stmt::SetBlock(x) => {
                self.expr(&x.target, d)?;
                if let Some(f) = &x.filter {
                    self.expr(f, d)?;
                }
                self.captured(&x.body, d)
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled, d)?;
                self.stmts(&a.body, d)
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter, d)?;
                self.captured(&f.body, d)
            }
            Stmt::Block(b) => self.stmts(&b.body, d),
            Stmt::Import(i) => {
                self.expr(&i.expr, d)?;
                self.expr(&i.name, d).map(drop)
            }
            Stmt::FromImport(i) => {
                self.expr(&i.expr, d)?;
                for (a, b) in &i.names {
                    self.expr(a, d)?;
                    if let Some(b) = b {
                        self.expr(b, d)?;
                    }
                }
                Ok(())
            }
            Stmt::Extends(e) => self.expr(&e.name, d).map(drop),
            Stmt::Include(i) => self.expr(&i.name, d).map(drop),
            Stmt::Macro(m) => self.macro_decl(m, d),
            Stmt::CallBlock(c) => {
                self.call(&c.call, d)?;
                self.macro_decl(&c.macro_decl, d)
            }
            Stmt::Do(x) => self.call(&x.call, d).map(drop),
        }
    }

    fn macro_decl(&mut self, m: &ast::Spanned<ast::Macro<'_>>, depth: usize) -> Result<(), String> {
        for e in m.args.iter().chain(&m.defaults) {
            self.expr(e, depth)?;
        }
        self.captured(&m.body, depth)
    }

    fn call(&mut self, c: &ast::Spanned<ast::Call<'_>>, depth: usize) -> Result<Extent, String> {
        let ext = union(span(c.span()), self.expr(&c.expr, depth)?);
        self.args(&c.args, ext, depth)
    }

    fn args(&mut self, args: &[ast::CallArg<'_>], mut ext: Extent, depth: usize) -> Result<Extent, String> {
        for a in args {
            let (ast::CallArg::Pos(e)
            | ast::CallArg::Kwarg(_, e)
            | ast::CallArg::PosSplat(e)
            | ast::CallArg::KwargSplat(e)) = a;
            ext = union(ext, self.expr(e, depth)?);
        }
        Ok(ext)
    }

    fn exprs<'e>(
        &mut self,
        items: impl IntoIterator<Item = &'e ast::Expr<'e>>,
        mut ext: Extent,
        depth: usize,
    ) -> Result<Extent, String> {
        for e in items {
            ext = union(ext, self.expr(e, depth)?);
        }
        Ok(ext)
    }

    /// The extent of `e` in the source; records the checked operators in it.
    fn expr(&mut self, e: &ast::Expr<'_>, depth: usize) -> Result<Extent, String> {
        use ast::Expr;
        if depth > MAX_EXPR_DEPTH {
            return Err(format!("an expression nests deeper than {MAX_EXPR_DEPTH} levels"));
        }
        let d = depth + 1;
        Ok(match e {
            Expr::Var(v) => span(v.span()),
            Expr::Const(c) => span(c.span()),
            Expr::Slice(s) => {
                let ext = union(span(s.span()), self.expr(&s.expr, d)?);
                self.exprs([&s.start, &s.stop, &s.step].into_iter().flatten(), ext, d)?
            }
            Expr::UnaryOp(u) => union(span(u.span()), self.expr(&u.expr, d)?),
            Expr::BinOp(b) => {
                let (left, right) = (self.expr(&b.left, d)?, self.expr(&b.right, d)?);
                let whole = union(union(span(b.span()), left), right);
                let func = match b.op {
                    ast::BinOpKind::Concat => Some("__concat"),
                    ast::BinOpKind::Add => Some("__add"),
                    ast::BinOpKind::Mul => Some("__mul"),
                    _ => None,
                };
                if let Some(func) = func {
                    self.sites.push(Site { whole, left, right, rewrite: Rewrite::Operator(func) });
                }
                whole
            }
            Expr::Compare(c) => {
                let ext = union(span(c.span()), self.expr(&c.expr, d)?);
                self.exprs(c.ops.iter().map(|o| &o.expr), ext, d)?
            }
            Expr::IfExpr(i) => {
                let ext = union(span(i.span()), self.expr(&i.test_expr, d)?);
                let ext = union(ext, self.expr(&i.true_expr, d)?);
                self.exprs(i.false_expr.iter(), ext, d)?
            }
            Expr::Filter(f) => {
                let ext = self.exprs(f.expr.iter(), span(f.span()), d)?;
                self.args(&f.args, ext, d)?
            }
            Expr::Test(t) => {
                let ext = union(span(t.span()), self.expr(&t.expr, d)?);
                self.args(&t.args, ext, d)?
            }
            Expr::GetAttr(g) => union(span(g.span()), self.expr(&g.expr, d)?),
            Expr::GetItem(g) => {
                let ext = union(span(g.span()), self.expr(&g.expr, d)?);
                union(ext, self.expr(&g.subscript_expr, d)?)
            }
            Expr::Call(c) => self.call(c, d)?,
            Expr::List(l) => self.exprs(&l.items, span(l.span()), d)?,
            Expr::Tuple(t) => self.exprs(&t.items, span(t.span()), d)?,
            Expr::Map(m) => self.exprs(m.keys.iter().chain(&m.values), span(m.span()), d)?,
        })
    }
}

/// A template source with its building checked: what [`rewrite`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The rewritten source.
    pub source: String,
    /// The literal texts of captured blocks, printed as `__literals[i]` (a template
    /// global of this list).
    pub literals: Vec<String>,
}

/// Rewrite `source` so what it builds is counted: every `~`, `+` and `*` becomes a
/// call of its checked function (`a ~ b` → `__concat(a, b)`, line breaks kept where
/// they were), and the literal text inside captured blocks (`{% set x %}`, a macro,
/// `{% filter %}`) is printed as a value (`{{ __literals[0] }}`). A source that does
/// not parse comes back as it is (its parse error is reported where it is compiled).
///
/// ```
/// use toolgate::template::{bounds::rewrite, env::syntax};
/// let c = rewrite("{{ a ~ b|upper }}{% macro m() %}x{% endmacro %}", syntax()).unwrap();
/// assert_eq!(c.source, "{{ __concat(a, b|upper) }}{% macro m() %}{{ __literals[0] }}{% endmacro %}");
/// assert_eq!(c.literals, ["x"]);
/// ```
///
/// Cost: one parse and one pass over the syntax tree.
///
/// # Errors
/// An expression or block that nests deeper than [`MAX_EXPR_DEPTH`].
pub fn rewrite(source: &str, syntax: minijinja::syntax::SyntaxConfig) -> Result<Checked, String> {
    let unchanged = || Checked { source: source.to_string(), literals: Vec::new() };
    let Ok(tree) = minijinja::machinery::parse(source, "<template>", syntax) else {
        return Ok(unchanged());
    };
    let mut found = Sites { source, sites: Vec::new(), literals: Vec::new(), captured: 0 };
    found.stmt(&tree, 0)?;
    let (mut sites, literals) = (found.sites, found.literals);
    if sites.is_empty() {
        return Ok(unchanged());
    }
    for s in sites.iter_mut().filter(|s| matches!(s.rewrite, Rewrite::Operator(_))) {
        s.left = balanced(source, s.left);
        s.right = balanced(source, s.right);
        s.whole = balanced(source, s.whole);
    }
    // Outermost first where several start at one place (`a ~ b ~ c`).
    sites.sort_by(|a, b| a.whole.0.cmp(&b.whole.0).then(b.whole.1.cmp(&a.whole.1)));
    let mut out = String::with_capacity(source.len() + sites.len() * 16);
    emit(source, (0, source.len()), &sites, &mut out);
    Ok(Checked { source: out, literals })
}

/// `ext` without the parentheses it does not close or open: a parenthesized
/// expression's span can start at its `(` and end before its `)`.
fn balanced(source: &str, (mut start, mut end): Extent) -> Extent {
    let text = source.as_bytes();
    let (mut opens, mut closes) = (Vec::new(), Vec::new());
    let mut quote = None;
    let mut i = start;
    while i < end {
        let b = text[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' => opens.push(i),
                b')' if opens.pop().is_none() => closes.push(i),
                _ => {}
            },
        }
        i += 1;
    }
    // Unmatched `(` lead the text, unmatched `)` end it.
    if let Some(&last) = opens.last() {
        start = last + 1;
    }
    if let Some(&first) = closes.first() {
        end = first;
    }
    let t = &source[start..end];
    (start + (t.len() - t.trim_start().len()), end - (t.len() - t.trim_end().len()))
}

/// Write `source[range]` with the outermost sites inside it rewritten.
fn emit(source: &str, range: Extent, sites: &[Site], out: &mut String) {
    let line_breaks = |s: &str| "\n".repeat(s.matches('\n').count());
    let mut pos = range.0;
    let first = sites.partition_point(|s| s.whole.0 < range.0);
    for s in &sites[first..] {
        if s.whole.0 >= range.1 {
            break;
        }
        if s.whole.0 < pos || s.whole.1 > range.1 {
            continue; // inside a site already written
        }
        out.push_str(&source[pos..s.whole.0]);
        pos = s.whole.1;
        let func = match s.rewrite {
            Rewrite::Literal(i) => {
                out.push_str(&format!("{{{{ __literals[{i}] }}}}"));
                continue;
            }
            Rewrite::Operator(func) => func,
        };
        out.push_str(func);
        out.push('(');
        out.push_str(&line_breaks(&source[s.whole.0..s.left.0]));
        emit(source, s.left, sites, out);
        out.push_str(", ");
        out.push_str(&line_breaks(&source[s.left.1..s.right.0]));
        emit(source, s.right, sites, out);
        out.push(')');
        out.push_str(&line_breaks(&source[s.right.1..s.whole.1]));
    }
    out.push_str(&source[pos..range.1]);
}
