//! Fork/join over candle's persistent barrier pool (`candle_core::utils::barrier_pool`,
//! sized by `CANDLE_NUM_THREADS`, else `RAYON_NUM_THREADS`, else the physical cores):
//! the one set of threads candle's own CPU ops run on, so the kernels never compete with
//! a second pool for the cores. The calling thread takes part, and the workers spin
//! briefly between calls, so the ~100 small parallel calls of a decode step pay no
//! wake-up latency.

use std::sync::Mutex;

/// Threads a parallel call runs on (workers plus the caller).
pub(super) fn threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// Run `f(i, chunk_i)` over the `len`-long chunks of `out` (the last may be shorter),
/// spread over the pool's threads; inline when there is a single chunk.
pub(super) fn for_each_chunk<T: Send>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    // One uncontended lock per chunk hands each task its own slice safely.
    let chunks: Vec<Mutex<&mut [T]>> = out.chunks_mut(len).map(Mutex::new).collect();
    if chunks.len() == 1 {
        let mut c = chunks.into_iter().next().expect("one chunk");
        return f(0, c.get_mut().unwrap_or_else(|p| p.into_inner()));
    }
    candle_core::utils::barrier_pool().execute_chunked(chunks.len(), |range| {
        for i in range {
            let mut c = chunks[i].lock().unwrap_or_else(|p| p.into_inner());
            f(i, &mut c);
        }
    });
}

/// Run `f(i)` for `i in 0..tasks`, spread over the pool's threads; inline when there is
/// a single task.
pub(super) fn for_each_task(tasks: usize, f: impl Fn(usize) + Sync) {
    if tasks == 1 {
        return f(0);
    }
    candle_core::utils::barrier_pool().execute_chunked(tasks, |range| range.for_each(&f));
}
