//! The server on the real SmolLM2 (generic fallback), driven over HTTP on 127.0.0.1.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

fn start(extra: &[&str]) -> Server {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("serve")
        .arg("--model")
        .arg(common::model(common::SMOLLM2))
        .args(["--port", &port.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if agent().get(format!("{base}/health")).call().is_ok_and(|r| r.status() == 200) {
            return Server { child, base };
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("server did not come up");
}

fn post(s: &Server, body: &str) -> (u16, Value) {
    let mut r = agent()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    (status, v)
}

#[test]
fn refuses_a_model_whose_template_cannot_do_tools() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("serve")
        .arg("--model")
        .arg(common::model(common::SMOLLM2))
        .args(["--port", &free_port().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rejected: its chat template does not support tool calling"), "{err}");
}

#[test]
fn answers_tool_calls_and_errors_like_openai() {
    let s = start(&["--tool-fallback", "generic"]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let body = json!({
        "model": "SmolLM2-135M-Instruct.Q4_1",
        "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
        "tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 40, "temperature": 0
    });
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string());
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    // Multi-turn: the tool result goes back through the template.
    let body = json!({
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "18 degrees and sunny"}
        ],
        "tools": tools, "tool_choice": "none", "max_tokens": 16, "temperature": 0
    });
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string());

    // response_format json_schema.
    let body = json!({"messages": [{"role": "user", "content": "A city as JSON"}], "max_tokens": 30, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "strict": true,
            "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"]}}}});
    let (status, v) = post(&s, &body.to_string());
    assert_eq!(status, 200, "{v}");
    let content: Value = serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(content["name"].is_string());

    // Errors.
    let (status, v) = post(&s, "{not json");
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let (status, v) = post(&s, &json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}).to_string());
    assert_eq!(status, 404, "{v}");
    let (status, v) = post(&s, &json!({"messages": []}).to_string());
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("messages")));
    let bad_schema = json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
        "json_schema": {"strict": true, "schema": {"type": "integer", "multipleOf": 2}}}});
    let (status, v) = post(&s, &bad_schema.to_string());
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("multipleOf"), "{v}");
    let (status, _) = post(&s, &json!({"messages": [{"role": "user", "content": "x"}], "temperature": -1}).to_string());
    assert_eq!(status, 400);
    let (status, v) = post(&s, &json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": tools}).to_string());
    assert_eq!(status, 400, "{v}");
    // A body over the limit: 413 as soon as the headers announce it.
    {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            5 << 20
        );
        c.write_all(head.as_bytes()).unwrap();
        let _ = c.write_all(&[b' '; 4096]);
        let mut resp = [0u8; 64];
        let n = c.read(&mut resp).expect("the server answers before the body is sent");
        assert!(
            String::from_utf8_lossy(&resp[..n]).starts_with("HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&resp[..n])
        );
    }
    let mut r = agent().get(format!("{}/props", s.base)).call().unwrap();
    let props: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(props["chat_format"], "generic");
    assert_eq!(props["caps"]["supports_tools"], true);
}
