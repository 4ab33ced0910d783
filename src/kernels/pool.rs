//! Fork/join over candle's persistent barrier pool (`candle_core::utils::barrier_pool`,
//! sized by `CANDLE_NUM_THREADS`, else `RAYON_NUM_THREADS`, else the physical cores):
//! the one set of threads candle's own CPU ops run on, so the kernels never compete with
//! a second pool for the cores. The calling thread takes part, and the workers spin
//! briefly between calls, so the ~100 small parallel calls of a decode step pay no
//! wake-up latency.

/// Threads a parallel call runs on (workers plus the caller).
pub(super) fn threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// Rows per task for `rows` independent rows of a few microseconds' work each (a
/// prefill's norms, RoPE, activation quantization): about two tasks per thread, at
/// least 8 rows each (below that, waking the pool costs more than it saves; a decode
/// step's single row stays on the calling thread).
pub(super) fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(2 * threads()).max(8)
}

/// Run `f(i, chunk_i)` over the `len`-long chunks of `out` (the last may be shorter),
/// spread over the pool's threads as [`for_each_task`] spreads tasks (inline when there
/// is a single chunk). Allocates nothing: each task reborrows its own disjoint chunk.
pub(super) fn for_each_chunk<T: Send>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    assert!(len > 0, "chunk length must be positive");
    let total = out.len();
    let chunks = total.div_ceil(len);
    if chunks == 0 {
        return;
    }
    let base = Base(out.as_mut_ptr());
    let base = &base;
    for_each_task(chunks, move |i| {
        let start = i * len;
        let end = (start + len).min(total);
        // SAFETY: task `i` alone touches `start..end`, inside `out`, which stays
        // mutably borrowed (so untouched by anyone else) until every task has returned.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), end - start) };
        f(i, chunk);
    });
}

/// `out`'s base pointer, shared by the tasks of [`for_each_chunk`].
struct Base<T>(*mut T);
// SAFETY: the tasks only ever form disjoint subslices of the `T: Send` elements.
unsafe impl<T: Send> Sync for Base<T> {}

/// Run `f(i)` for `i in 0..tasks`, spread over the pool's threads; inline when there is
/// a single task, or when called from inside a task (the pool runs one call at a time:
/// a nested call from the thread that made the outer one would wait for itself).
pub(super) fn for_each_task(tasks: usize, f: impl Fn(usize) + Sync) {
    if tasks == 1 || IN_TASK.get() {
        return (0..tasks).for_each(f);
    }
    candle_core::utils::barrier_pool().execute_chunked(tasks, |range| {
        let _inside = InTask::enter();
        range.for_each(&f)
    });
}

thread_local! {
    /// Whether this thread is running a task of [`for_each_task`].
    static IN_TASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the thread as inside a task until dropped (a panicking task included).
struct InTask(bool);

impl InTask {
    fn enter() -> Self {
        Self(IN_TASK.replace(true))
    }
}

impl Drop for InTask {
    fn drop(&mut self) {
        IN_TASK.set(self.0);
    }
}
