//! Bench output: a terminal table and an SVG chart comparing modes per category.
//!
//! The chart is written as SVG text directly (grouped bars, two panels: BFCL AST
//! accuracy and schema-valid calls), so it needs no font or graphics library and
//! opens in any browser.

use std::fmt::Write;

use super::{Mode, Summary};

/// One summary as the table's cells, in column order.
fn cells(r: &Summary) -> [String; 12] {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    [
        r.mode.as_str().to_string(),
        r.category.clone(),
        r.tasks.to_string(),
        r.call_rate.map(pct).unwrap_or_else(|| "-".into()),
        pct(r.parse_rate),
        pct(r.schema_valid_rate),
        pct(r.declared_rate),
        pct(r.ast_accuracy),
        format!("{:.1}", r.tokens_per_s),
        format!("{:.2}", r.ttft_s),
        format!("{:.3}", r.mask_ms_per_token),
        pct(r.forced_share),
    ]
}

/// The summaries as an aligned text table.
pub fn table(summaries: &[Summary]) -> String {
    const HEAD: [&str; 12] = [
        "mode",
        "category",
        "tasks",
        "called",
        "parse",
        "schema",
        "declared",
        "AST",
        "tok/s",
        "TTFT s",
        "mask ms/t",
        "forced",
    ];
    const WIDTH: [usize; 12] = [12, 18, 5, 7, 7, 8, 9, 7, 7, 7, 10, 7];
    let line = |cells: &[String]| {
        let row: Vec<String> = cells
            .iter()
            .zip(WIDTH)
            .enumerate()
            .map(|(i, (c, w))| if i < 2 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        row.join(" ") + "\n"
    };
    let mut s = line(&HEAD.map(str::to_string));
    for r in summaries {
        s.push_str(&line(&cells(r)));
    }
    s
}

/// The summaries as a Markdown table (for BENCHMARKS.md).
pub fn markdown(summaries: &[Summary]) -> String {
    let mut s = String::from(
        "| mode | category | tasks | called | parse | schema-valid | declared tool | BFCL AST | tok/s | TTFT s | mask ms/token | forced |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in summaries {
        let _ = writeln!(s, "| {} |", cells(r).join(" | "));
    }
    s
}

fn color(mode: Mode) -> &'static str {
    match mode {
        Mode::Constrained => "#2b6cb0",
        Mode::Native => "#dd6b20",
        Mode::PromptOnly => "#718096",
        Mode::Server => "#2f855a",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// An SVG chart: per category, one bar per mode, for AST accuracy (top panel) and
/// schema-valid calls (bottom panel). `title` goes on top (the model's name).
pub fn svg(title: &str, summaries: &[Summary]) -> String {
    let mut modes: Vec<Mode> = Vec::new();
    let mut cats: Vec<&str> = Vec::new();
    for r in summaries {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
        if !cats.contains(&r.category.as_str()) {
            cats.push(&r.category);
        }
    }
    let bar_w = 22.0;
    let group_w = bar_w * modes.len() as f64 + 28.0;
    let (left, top, panel_h, gap) = (60.0, 60.0, 200.0, 90.0);
    let width = left + group_w * cats.len() as f64 + 30.0;
    let height = top + 2.0 * panel_h + gap + 70.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{left}" y="24" font-size="16" font-weight="bold">{}</text>"#, escape(title));
    for (i, m) in modes.iter().enumerate() {
        let x = left + 140.0 * i as f64;
        let _ = writeln!(s, r#"<rect x="{x}" y="34" width="12" height="12" fill="{}"/>"#, color(*m));
        let _ = writeln!(s, r#"<text x="{}" y="45">{}</text>"#, x + 16.0, m.as_str());
    }
    type Metric = fn(&Summary) -> f64;
    let panels: [(&str, Metric); 2] =
        [("BFCL AST accuracy", |r| r.ast_accuracy), ("schema-valid calls", |r| r.schema_valid_rate)];
    for (p, (label, value)) in panels.iter().enumerate() {
        let y0 = top + p as f64 * (panel_h + gap) + 20.0;
        let base = y0 + panel_h;
        let _ = writeln!(s, r#"<text x="{left}" y="{}" font-weight="bold">{label}</text>"#, y0 - 6.0);
        for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let y = base - tick * panel_h;
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{:.0}" y1="{y:.1}" y2="{y:.1}" stroke="#e2e8f0"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
                width - 20.0,
                left - 6.0,
                y + 4.0,
                tick * 100.0
            );
        }
        for (ci, cat) in cats.iter().enumerate() {
            let gx = left + group_w * ci as f64 + 14.0;
            for (mi, m) in modes.iter().enumerate() {
                let Some(r) = summaries.iter().find(|r| r.mode == *m && r.category == *cat) else { continue };
                let v = value(r).clamp(0.0, 1.0);
                let h = v * panel_h;
                let x = gx + bar_w * mi as f64;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{} {}: {:.1}%</title></rect>"#,
                    base - h,
                    bar_w - 3.0,
                    color(*m),
                    m.as_str(),
                    escape(cat),
                    v * 100.0
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{:.0}</text>"#,
                    x + (bar_w - 3.0) / 2.0,
                    base - h - 3.0,
                    v * 100.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + bar_w * modes.len() as f64 / 2.0,
                base + 16.0,
                escape(cat)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
