//! Start `toolgate serve` on the real SmolLM2 for end-to-end tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `toolgate serve` child process, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// A `/proc/PID/status` field in MiB (`VmRSS`, `VmHWM` the peak).
    pub fn memory_mib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
    }

    /// Send SIGTERM and wait up to `limit` for the process to exit; how long it took,
    /// or `None` if it was still running (then it is killed on drop).
    pub fn terminate(&mut self, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        self.send_term();
        self.wait_exit(limit).map(|_| t.elapsed())
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Send SIGTERM and return at once.
    pub fn send_term(&self) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(sent.success(), "kill -TERM failed");
    }

    /// Wait up to `limit` for the process to exit; how long that took, or `None` if it
    /// was still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.child.try_wait().unwrap().is_some() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// Start the server on SmolLM2 with `extra` flags; waits for `/health`.
pub fn start(extra: &[&str]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("serve").arg("--model").arg(super::model(super::SMOLLM2)).args(extra);
    spawn_on_any_port(cmd).expect("server did not come up")
}

/// Run `cmd` (a `toolgate serve` without `--port`) on a port the server picks itself
/// (`--port 0`), read the address it prints, and wait up to a minute for `/health`.
///
/// A port picked by the test and handed over (`free_port`) can be taken by another
/// test's server in between; then this test talks to the wrong server.
pub fn spawn_on_any_port(mut cmd: Command) -> Option<Server> {
    let mut child = cmd.args(["--port", "0"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Keeps draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.split(" on http://").nth(1).filter(|_| line.starts_with("toolgate serving")) {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let mut server = Server { child, base: String::new() };
    let addr = rx.recv_timeout(Duration::from_secs(60)).ok()?;
    server.base = format!("http://{addr}");
    wait_for_health(server)
}

/// Run `cmd` (a `toolgate serve` that listens on `port`) and wait up to a minute for
/// `/health`; `None` (the child killed) if it never answers.
pub fn spawn(mut cmd: Command, port: u16) -> Option<Server> {
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for_health(Server { child, base: format!("http://127.0.0.1:{port}") })
}

fn wait_for_health(server: Server) -> Option<Server> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if agent().get(format!("{}/health", server.base)).call().is_ok_and(|r| r.status() == 200) {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// POST `body` as JSON to `path` on `s`: the status and the JSON answer (`null` when
/// the body is not JSON).
pub fn post_json(s: &Server, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (status, text) = post_text(s, path, body);
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// POST `body` as JSON to `path` on `s`: the status and the answer's text (a stream's
/// events, whole).
pub fn post_text(s: &Server, path: &str, body: &serde_json::Value) -> (u16, String) {
    let mut r = agent()
        .post(format!("{}{path}", s.base))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap())
}

/// GET `path` on `s`: the status and the JSON answer (`null` when the body is not JSON).
pub fn get_json(s: &Server, path: &str) -> (u16, serde_json::Value) {
    let (status, text) = get_text(s, path);
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// GET `path` on `s`: the status and the answer's text.
pub fn get_text(s: &Server, path: &str) -> (u16, String) {
    let mut r = agent().get(format!("{}{path}", s.base)).call().unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap())
}
