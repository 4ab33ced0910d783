//! Resumable, verified download of one file into the cache.
//!
//! Bytes go to `blobs/{sha256}.incomplete`. A dropped connection is resumed with a
//! `Range: bytes=N-` request (up to [`Download::attempts`] times); a server that
//! answers 200 instead of 206 restarts the file. When all bytes are there, their
//! sha256 is compared with the one the Hub reported: a match is renamed to
//! `blobs/{sha256}` (atomic on one filesystem), a mismatch deletes the partial file.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::http::Http;
use super::{HubError, Progress};

/// One file to download.
#[derive(Debug, Clone)]
pub(crate) struct Download {
    /// Where to GET it (after the resolve redirect, or the resolve URL).
    pub url: String,
    /// Expected size in bytes.
    pub size: u64,
    /// Expected sha256, lower-case hex.
    pub sha256: String,
    /// The partial file.
    pub incomplete: PathBuf,
    /// The final blob.
    pub blob: PathBuf,
    /// Connection attempts before giving up.
    pub attempts: u32,
}

fn io(path: &Path, source: std::io::Error) -> HubError {
    HubError::Io { path: path.to_path_buf(), source }
}

/// The lower-case hex sha256 of a file.
///
/// # Errors
/// [`HubError::Io`].
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(|e| io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

impl Download {
    /// Run it. Returns the verified blob path.
    pub fn run(&self, http: &Http, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
        if let Some(dir) = self.incomplete.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let mut have = std::fs::metadata(&self.incomplete).map(|m| m.len()).unwrap_or(0);
        if have > self.size {
            have = 0;
            File::create(&self.incomplete).map_err(|e| io(&self.incomplete, e))?;
        }
        progress.start(self.size, have);
        let mut last_error = None;
        let mut attempt = 0;
        while have < self.size {
            attempt += 1;
            if attempt > self.attempts {
                let reason = last_error.unwrap_or_else(|| "no progress".to_string());
                return Err(HubError::Interrupted { url: self.url.clone(), have, size: self.size, reason });
            }
            if attempt > 1 {
                tracing::warn!(
                    "download interrupted at {have} of {} bytes ({}); resuming, attempt {attempt}/{}",
                    self.size,
                    last_error.as_deref().unwrap_or(""),
                    self.attempts
                );
                std::thread::sleep(Duration::from_millis(200 * u64::from(attempt - 1)));
            }
            match self.attempt(http, have, progress) {
                Ok(now) => have = now,
                Err(HubError::Network { reason, .. }) => {
                    last_error = Some(reason);
                    have = std::fs::metadata(&self.incomplete).map(|m| m.len()).unwrap_or(0);
                }
                Err(e) => return Err(e),
            }
        }
        progress.finish();
        let actual = sha256_file(&self.incomplete)?;
        if actual != self.sha256 {
            let _ = std::fs::remove_file(&self.incomplete);
            return Err(HubError::ChecksumMismatch { url: self.url.clone(), expected: self.sha256.clone(), actual });
        }
        std::fs::rename(&self.incomplete, &self.blob).map_err(|e| io(&self.blob, e))?;
        Ok(self.blob.clone())
    }

    /// One connection: returns the bytes on disk afterwards. Network failures while
    /// reading the body are [`HubError::Network`] (retried by the caller).
    fn attempt(&self, http: &Http, have: u64, progress: &mut dyn Progress) -> Result<u64, HubError> {
        let range = (have > 0).then_some((have, None));
        let resp = http.send("GET", &self.url, range)?;
        if resp.status == 416 {
            // Our partial file does not fit the remote one: start over.
            File::create(&self.incomplete).map_err(|e| io(&self.incomplete, e))?;
            progress.start(self.size, 0);
            return Ok(0);
        }
        let resp = http.check(resp, "the model file")?;
        let (mut file, mut have) = if resp.status == 206 {
            let f = OpenOptions::new().append(true).open(&self.incomplete).map_err(|e| io(&self.incomplete, e))?;
            (f, have)
        } else {
            if have > 0 {
                tracing::warn!("the server ignored the Range request; restarting the download");
                progress.start(self.size, 0);
            }
            (File::create(&self.incomplete).map_err(|e| io(&self.incomplete, e))?, 0)
        };
        let mut body = resp.inner.into_body().into_reader();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = match body.read(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    file.flush().map_err(|e| io(&self.incomplete, e))?;
                    return Err(HubError::Network { url: self.url.clone(), reason: e.to_string() });
                }
            };
            if n == 0 {
                break;
            }
            if have + n as u64 > self.size {
                let _ = std::fs::remove_file(&self.incomplete);
                return Err(HubError::Protocol(format!(
                    "{}: the server sent more than the {} bytes the Hub reported",
                    self.url, self.size
                )));
            }
            file.write_all(&buf[..n]).map_err(|e| io(&self.incomplete, e))?;
            have += n as u64;
            progress.advance(n as u64);
        }
        file.flush().map_err(|e| io(&self.incomplete, e))?;
        if have < self.size {
            return Err(HubError::Network {
                url: self.url.clone(),
                reason: format!("connection closed after {have} of {} bytes", self.size),
            });
        }
        Ok(have)
    }
}
