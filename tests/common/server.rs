//! Start `toolgate serve` on the real SmolLM2 for end-to-end tests.

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
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("serve")
        .arg("--model")
        .arg(super::model(super::SMOLLM2))
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
    let _ = child.kill();
    let _ = child.wait();
    panic!("server did not come up");
}
