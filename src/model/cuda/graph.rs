//! CUDA graphs of a single-sequence decode step.
//!
//! A step's work — every candle op and toolgate kernel from the embedding lookup to the
//! logits — is the same from one token to the next but for values that live in device
//! memory (the token id, the position, RoPE's cos/sin: the decoder writes them into
//! fixed tensors before each step, and the kernels read the position from there). So
//! the step is captured once and replayed: one launch instead of hundreds, and no
//! per-op host work.
//!
//! What invalidates a graph is a change of the buffers it was captured over: the KV
//! cache growing, another slot. [`Graphs::run`] is handed a key (the buffers'
//! addresses) and keeps up to [`MAX_GRAPHS`] graphs by key. A key's first step runs
//! directly with candle's parameter cache on (so the small parameter uploads candle
//! makes are cached and can be replayed), its second is captured, the rest replay.
//! A capture that fails (an op that copies to the host, say) falls back to running
//! the step directly; after [`MAX_FAILURES`] failures graphs are off for this decoder.

use candle_core::cuda_backend::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use candle_core::cuda_backend::cudarc::driver::CudaGraph;
use candle_core::Device;

use crate::Result;

/// Graphs kept per decoder (one per slot and cache size, most recent first).
const MAX_GRAPHS: usize = 8;
/// Failed captures after which graphs are turned off.
const MAX_FAILURES: usize = 2;

/// A decoder's captured decode steps.
#[derive(Default)]
pub(crate) struct Graphs {
    /// The key whose step last ran directly with the parameter cache on.
    warm: Option<Vec<u64>>,
    graphs: Vec<(Vec<u64>, Exec)>,
    failures: usize,
}

/// A captured graph. cudarc's graph is not `Send`; the decoder that owns it runs on
/// one thread at a time (`Model: Send`, not `Sync`), which is all the driver asks.
struct Exec(CudaGraph);

// SAFETY: a CUgraphExec may be used from any thread as long as uses are not
// concurrent; `Graphs` is only reached through `&mut` of its decoder.
unsafe impl Send for Exec {}

impl std::fmt::Debug for Graphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graphs({} captured, {} failed)", self.graphs.len(), self.failures)
    }
}

impl Graphs {
    /// Run one decode step: replay the graph captured for `key`, or capture `step`
    /// (the second time this key is seen), or run it directly. `step` must do the same
    /// device work every time for one key, reading what changes from device memory.
    ///
    /// # Errors
    /// A driver error replaying a graph; `step`'s own errors.
    pub(crate) fn run(&mut self, device: &Device, key: Vec<u64>, mut step: impl FnMut() -> Result<()>) -> Result<()> {
        if self.failures >= MAX_FAILURES || !super::graphs() {
            return step();
        }
        let dev = device.as_cuda_device()?;
        if let Some(i) = self.graphs.iter().position(|(k, _)| *k == key) {
            let g = self.graphs.remove(i);
            g.1 .0.launch().map_err(|e| crate::Error::Device { device: "cuda".into(), reason: e.to_string() })?;
            self.graphs.insert(0, g);
            return Ok(());
        }
        let stream = dev.cuda_stream();
        if self.warm.as_ref() == Some(&key) {
            let _cache = dev.enable_cuda_graph_htod_cache();
            let captured = match stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) {
                Ok(()) => {
                    let ran = step();
                    let flags = CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
                    let ended = stream.end_capture(flags);
                    match (ran, ended) {
                        (Ok(()), Ok(Some(g))) => g.launch().map(|()| g).map_err(|e| e.to_string()),
                        (Err(e), _) => Err(e.to_string()),
                        (_, Err(e)) => Err(e.to_string()),
                        (_, Ok(None)) => Err("empty capture".into()),
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            match captured {
                Ok(g) => {
                    let mut nodes = 0usize;
                    // SAFETY: counting the nodes of a graph this struct owns; nothing is kept.
                    let counted = unsafe {
                        candle_core::cuda_backend::cudarc::driver::sys::cuGraphGetNodes(
                            g.cu_graph(),
                            std::ptr::null_mut(),
                            &mut nodes,
                        )
                    };
                    tracing::info!("captured a CUDA decode step: {nodes} graph nodes ({counted:?})");
                    self.graphs.insert(0, (key, Exec(g)));
                    self.graphs.truncate(MAX_GRAPHS);
                    return Ok(());
                }
                Err(e) => {
                    self.failures += 1;
                    self.warm = None;
                    tracing::warn!("CUDA graph capture of a decode step failed ({e}); running it directly");
                    drop(_cache);
                    return step();
                }
            }
        }
        {
            let _cache = dev.enable_cuda_graph_htod_cache();
            step()?;
        }
        self.warm = Some(key);
        Ok(())
    }
}
