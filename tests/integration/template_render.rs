//! Rendering equals transformers' output on 39 real vendor templates × 4 conversations
//! (`tests/fixtures/templates/expected-render.jsonl`).

use toolgate::template::{ChatTemplate, Clock, RenderRequest};

fn clock() -> Clock {
    Clock::Fixed(chrono::NaiveDate::from_ymd_opt(2026, 1, 15).unwrap().and_hms_opt(12, 0, 0).unwrap())
}

/// Known, argued differences (docs/templates.md): Python-only semantics minijinja does
/// not have. Anything else that differs fails the test.
const KNOWN: &[(&str, &str)] = &[
    // `map(...)` is a generator in Jinja2, so `|tojson` raises there; here it is a list
    // and the tools render.
    ("llama-cpp-deepseek-r1.jinja", "tools"),
    ("llama-cpp-deepseek-r1.jinja", "tool_roundtrip"),
    // `"…"|safe + str` HTML-escapes the str in Python (Markup.__add__), turning the tool
    // JSON into `&#34;`-soup; toolgate concatenates plainly and the JSON stays readable.
    ("meetkai-functionary-medium-v3.1.jinja", "tools"),
    ("meetkai-functionary-medium-v3.1.jinja", "tool_roundtrip"),
];

#[test]
fn renders_byte_identical_to_transformers() {
    let dir = crate::common::templates_dir();
    let corpus = crate::common::fixture_text("templates/expected-render.jsonl");
    let (mut pass, mut total) = (0, 0);
    let mut failures = Vec::new();
    for line in corpus.lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = case["template"].as_str().unwrap();
        let source = std::fs::read_to_string(dir.join(name)).unwrap();
        total += 1;
        let input = &case["input"];
        let req = RenderRequest {
            messages: input["messages"].as_array().unwrap().clone(),
            tools: input["tools"].as_array().cloned(),
            // transformers passes `tools=None` when there are none.
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            bos_token: case["bos_token"].as_str().unwrap().into(),
            eos_token: case["eos_token"].as_str().unwrap().into(),
            extra: [("tools".to_string(), serde_json::Value::Null)].into_iter().collect(),
        };
        let got = ChatTemplate::with_clock(name, source, clock()).and_then(|t| t.render(&req));
        let case_name = case["case"].as_str().unwrap();
        let label = format!("{name} / {case_name}");
        if KNOWN.contains(&(name, case_name)) {
            assert!(
                !matches!((&got, case.get("output")), (Ok(t), Some(w)) if w.as_str() == Some(t.as_str())),
                "{label} is listed as a known difference but now matches: remove it from KNOWN"
            );
            continue;
        }
        match (&got, case.get("output"), case.get("error")) {
            (Ok(text), Some(want), _) if want.as_str() == Some(text.as_str()) => pass += 1,
            (Err(_), None, Some(_)) => pass += 1,
            // Python's sandbox refusing `list.append` is not the template's error.
            (Ok(_), None, Some(e)) if e.as_str().unwrap_or("").contains("SecurityError") => pass += 1,
            (Ok(text), Some(want), _) => {
                failures.push(format!("{label}: differs\n--- want\n{}\n--- got\n{text}", want.as_str().unwrap()))
            }
            (Err(e), Some(_), _) => failures.push(format!("{label}: raised {e}")),
            (Ok(_), None, Some(e)) => failures.push(format!("{label}: rendered, transformers raised {e}")),
            _ => failures.push(format!("{label}: malformed case")),
        }
    }
    eprintln!("render corpus: {pass}/{total} match transformers ({} known differences)", KNOWN.len());
    assert_eq!(total, 156);
    assert_eq!(pass + KNOWN.len(), total);
    std::fs::write(std::env::temp_dir().join("toolgate-render-failures.txt"), failures.join("\n\n")).ok();
    assert!(
        failures.is_empty(),
        "{pass}/{total}; first failures:\n{}",
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n\n")
    );
}

#[test]
fn printed_values_and_tojson_follow_python() {
    let t = ChatTemplate::new(
        "py",
        "{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f }}|{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ '<&>' | tojson }}",
    )
    .unwrap();
    let mut req = RenderRequest::new(vec![]);
    req.extra = serde_json::json!({
        "a": true, "b": null, "c": 1.0, "d": {"k": [1, "x", false], "é": "ü\n"}, "e": 1e16, "f": "it's"
    })
    .as_object()
    .unwrap()
    .clone();
    let out = t.render(&req).unwrap();
    assert_eq!(
        out,
        "True|None|1.0|{'k': [1, 'x', False], 'é': 'ü\\n'}|1e+16|it's|{\"k\": [1, \"x\", false], \"é\": \"ü\\n\"}|{\n  \"k\": [\n    1,\n    \"x\",\n    false\n  ],\n  \"é\": \"ü\\n\"\n}|\"<&>\""
    );
}

#[test]
fn python_list_append_and_none_loops_behave_as_in_python() {
    let t = ChatTemplate::new(
        "append",
        "{%- set ns = namespace(ids=[]) -%}{%- for m in messages -%}{%- set _ = ns.ids.append(m.role) -%}{%- endfor -%}{{ ns.ids | join(',') }}",
    )
    .unwrap();
    let req = RenderRequest::new(vec![serde_json::json!({"role": "user"}), serde_json::json!({"role": "assistant"})]);
    assert_eq!(t.render(&req).unwrap(), "user,assistant");
    // Iterating None raises, as in Python; an undefined variable iterates as empty.
    let t = ChatTemplate::new("none", "{% for t in tools %}{{ t }}{% endfor %}ok").unwrap();
    let mut req = RenderRequest::new(vec![]);
    assert_eq!(t.render(&req).unwrap(), "ok");
    req.extra.insert("tools".into(), serde_json::Value::Null);
    assert!(t.render(&req).unwrap_err().to_string().contains("'NoneType' object is not iterable"));
}
