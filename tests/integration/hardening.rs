//! Hostile and careless clients, templates, GGUF files and flags (issue 29): each gets
//! a bounded, clear answer and the server keeps serving everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::server::{agent, start, Server};

fn addr(s: &Server) -> &str {
    s.base.trim_start_matches("http://")
}

/// Read until the peer closes (or 20 s pass): what it sent and when it closed.
fn read_to_close(c: &mut TcpStream, since: Instant) -> (String, Duration) {
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), since.elapsed())
}

fn health(s: &Server) -> u16 {
    agent().get(format!("{}/health", s.base)).call().map(|r| r.status().as_u16()).unwrap_or(0)
}

#[test]
fn stalled_clients_time_out_are_capped_and_never_hold_up_shutdown() {
    let mut s = start(&[
        "--tool-fallback",
        "generic",
        "--header-timeout",
        "1",
        "--body-timeout",
        "2",
        "--max-connections",
        "8",
    ]);
    let t = Instant::now();
    // Connections that send nothing, half a head, or half a body.
    let mut silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr(&s)).unwrap()).collect();
    let mut head = TcpStream::connect(addr(&s)).unwrap();
    head.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: applic").unwrap();
    let mut body = TcpStream::connect(addr(&s)).unwrap();
    body.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 90\r\n\r\n{\"messages\"")
        .unwrap();
    // The others are still served meanwhile.
    assert_eq!(health(&s), 200);

    let (said, after) = read_to_close(&mut head, t);
    assert!(after < Duration::from_secs(5), "a half-sent head held its connection {after:?}");
    assert!(!said.contains("200 OK"), "{said}");
    let (said, after) = read_to_close(&mut body, t);
    assert!(after >= Duration::from_secs(2) && after < Duration::from_secs(6), "body timeout after {after:?}");
    assert!(said.starts_with("HTTP/1.1 408"), "a stalled body gets 408: {said}");
    assert!(said.contains("did not arrive within 2 s"), "{said}");
    for c in &mut silent {
        let (said, after) = read_to_close(c, t);
        assert!(said.is_empty() && after < Duration::from_secs(5), "{said:?} after {after:?}");
    }

    // Past the cap, new connections are closed at once and counted; the held ones are
    // still served.
    let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr(&s)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(addr(&s)).unwrap();
    let _ = extra.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    let (said, _) = read_to_close(&mut extra, Instant::now());
    assert!(said.is_empty(), "a connection past the cap was served: {said}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let mut r = agent().get(format!("{}/metrics", s.base)).call().unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    let refused = text.lines().find(|l| l.starts_with("toolgate_connections_refused_total ")).unwrap_or_default();
    assert!(!refused.ends_with(" 0") && !refused.is_empty(), "{text}");

    // SIGTERM with a generation in progress, an idle connection and a half-sent head:
    // the generation finishes and is answered, the others do not hold the exit up.
    let _idle = TcpStream::connect(addr(&s)).unwrap();
    let mut stalled = TcpStream::connect(addr(&s)).unwrap();
    stalled.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n").unwrap();
    let req = json!({"messages": [{"role": "user", "content": "Count from one to fifty in words."}],
        "max_tokens": 48, "temperature": 0})
    .to_string();
    let mut gen = TcpStream::connect(addr(&s)).unwrap();
    write!(gen, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{req}", req.len()).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the turn has started
    let took = s.terminate(Duration::from_secs(30)).expect("the server did not exit within 30 s of SIGTERM");
    let (said, _) = read_to_close(&mut gen, Instant::now());
    assert!(said.starts_with("HTTP/1.1 200"), "the request in progress was not answered: {said}");
    let body: Value = serde_json::from_str(said.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    // Well under the 1 s header timeout plus the turn: the stalled head was not waited on.
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn flags_out_of_range_are_refused_before_loading() {
    for (flag, value) in
        [("--parallel", "100000"), ("--parallel", "0"), ("--header-timeout", "-1"), ("--max-connections", "0")]
    {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--model", "/nonexistent.gguf", &format!("{flag}={value}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{flag} {value}: {err}");
    }
}
