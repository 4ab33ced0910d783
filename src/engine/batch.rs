//! Concurrent sequences on one model, their decode steps batched.
//!
//! [`super::Engine::into_batched`] turns one engine into `n` engines that share the
//! weights, the tokenizer, the constraint vocabulary and the grammar cache; each owns
//! one sequence slot of the model (its own KV cache). Each engine runs its
//! generations as usual, on its own thread; what changes is the model underneath: a
//! [`SlotModel`] whose one-token decode steps meet in a [`Batcher`]. A step runs once
//! every sequence that is decoding has asked for its next token, as one
//! [`Model::forward_batch`] pass: decode reads all the weights per step whatever the
//! number of rows, so `b` sequences cost about what one does.
//!
//! - Prefill (more than one token, or [`Model::forward_tail`]) runs alone, for one
//!   sequence, while the others wait for the model; the prefilling sequence is not
//!   waited for by the batch until its first decode step.
//! - A sequence leaves the batch when its generation ends
//!   ([`Model::finish_sequence`], which the engine calls on every exit path), so the
//!   others never wait for a sequence that will not step again.
//! - Rows are independent: a sequence's tokens are those it would generate alone, up
//!   to floating-point rounding of the batched matmul.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::model::Model;
use crate::{Error, Result};

/// The shared model and the meeting point of the decode steps.
pub struct Batcher {
    model: Mutex<Box<dyn Model>>,
    state: Mutex<State>,
    ready: Condvar,
    steps: AtomicU64,
    rows: AtomicU64,
    widest: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Slots in their decode phase: a step waits for each of them.
    decoding: Vec<bool>,
    /// `(slot, token)` of the sequences waiting for the next step.
    pending: Vec<(usize, u32)>,
    /// A step is running (its rows were taken from `pending`).
    running: bool,
    /// Each finished row's logits (or the step's error), by slot.
    done: HashMap<usize, std::result::Result<Vec<f32>, String>>,
}

impl State {
    fn waiting_for(&self) -> usize {
        self.decoding.iter().filter(|&&d| d).count()
    }
}

/// Counters of the batched decode steps, for metrics: steps run, rows (tokens) they
/// decoded, and the widest step. Rows ÷ steps is the mean batch size.
#[derive(Clone)]
pub struct BatchStats(Arc<Batcher>);

impl BatchStats {
    /// Decode steps run.
    pub fn steps(&self) -> u64 {
        self.0.steps.load(Ordering::Relaxed)
    }

    /// Tokens those steps decoded (one per sequence per step).
    pub fn rows(&self) -> u64 {
        self.0.rows.load(Ordering::Relaxed)
    }

    /// The most sequences one step decoded.
    pub fn widest(&self) -> u64 {
        self.0.widest.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for BatchStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStats").field("steps", &self.steps()).field("rows", &self.rows()).finish()
    }
}

impl Batcher {
    /// Share `model`, made to hold `slots` sequences; one [`SlotModel`] per slot.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a model that holds one sequence only, or 0 slots.
    pub fn split(mut model: Box<dyn Model>, slots: usize) -> Result<(Vec<SlotModel>, BatchStats)> {
        if slots == 0 {
            return Err(Error::InvalidParameter { name: "parallel", reason: "at least one sequence".into() });
        }
        model.set_slots(slots)?;
        let (context_length, vocab_size, architecture) =
            (model.context_length(), model.vocab_size(), model.architecture().to_string());
        let shared = Arc::new(Batcher {
            model: Mutex::new(model),
            state: Mutex::new(State { decoding: vec![false; slots], ..State::default() }),
            ready: Condvar::new(),
            steps: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            widest: AtomicU64::new(0),
        });
        let models = (0..slots)
            .map(|slot| SlotModel {
                shared: shared.clone(),
                slot,
                context_length,
                vocab_size,
                architecture: architecture.clone(),
            })
            .collect();
        Ok((models, BatchStats(shared)))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn model(&self) -> MutexGuard<'_, Box<dyn Model>> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `slot` stops taking part in decode steps.
    fn leave(&self, slot: usize) {
        let mut st = self.state();
        if std::mem::replace(&mut st.decoding[slot], false) {
            // A step may now have every row it waits for.
            self.ready.notify_all();
        }
    }

    /// Decode `token` for `slot` in the next step; block until that step ran.
    fn decode(&self, slot: usize, token: u32) -> Result<Vec<f32>> {
        let mut st = self.state();
        st.decoding[slot] = true;
        st.pending.push((slot, token));
        loop {
            if let Some(r) = st.done.remove(&slot) {
                return r.map_err(|e| Error::Candle(candle_core::Error::Msg(e)));
            }
            if !st.running && !st.pending.is_empty() && st.pending.len() >= st.waiting_for() {
                // Every decoding sequence is here: this thread runs the step.
                let rows = std::mem::take(&mut st.pending);
                st.running = true;
                drop(st);
                let out = self.model().forward_batch(&rows);
                self.steps.fetch_add(1, Ordering::Relaxed);
                self.rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
                self.widest.fetch_max(rows.len() as u64, Ordering::Relaxed);
                st = self.state();
                match out {
                    Ok(logits) => {
                        for (&(s, _), l) in rows.iter().zip(logits) {
                            st.done.insert(s, Ok(l));
                        }
                    }
                    Err(e) => {
                        for &(s, _) in &rows {
                            st.done.insert(s, Err(format!("batched decode step failed: {e}")));
                        }
                    }
                }
                st.running = false;
                self.ready.notify_all();
                continue;
            }
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One sequence slot of a shared model: a [`Model`] whose one-token steps are batched
/// with the other slots' (see the module docs). Everything else (prefill, truncation,
/// position) runs on its own slot under the model's lock.
pub struct SlotModel {
    shared: Arc<Batcher>,
    slot: usize,
    context_length: usize,
    vocab_size: usize,
    architecture: String,
}

impl SlotModel {
    /// Run `f` on the shared model with this slot selected.
    fn alone<T>(&self, f: impl FnOnce(&mut dyn Model) -> Result<T>) -> Result<T> {
        let mut m = self.shared.model();
        m.select_slot(self.slot)?;
        f(m.as_mut())
    }
}

impl Model for SlotModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if let [token] = tokens {
            return self.shared.decode(self.slot, *token);
        }
        self.shared.leave(self.slot);
        self.alone(|m| m.forward(tokens))
    }

    fn forward_tail(&mut self, tokens: &[u32], n: usize) -> Result<Vec<Vec<f32>>> {
        self.shared.leave(self.slot);
        self.alone(|m| m.forward_tail(tokens, n))
    }

    fn forward_scored(&mut self, tokens: &[u32], candidates: &[Vec<u32>]) -> Result<(Vec<Vec<f32>>, Vec<f32>)> {
        self.shared.leave(self.slot);
        self.alone(|m| m.forward_scored(tokens, candidates))
    }

    fn position(&self) -> usize {
        self.alone(|m| Ok(m.position())).unwrap_or(0)
    }

    fn truncate(&mut self, len: usize) {
        self.shared.leave(self.slot);
        let _ = self.alone(|m| {
            m.truncate(len);
            Ok(())
        });
    }

    fn context_length(&self) -> usize {
        self.context_length
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn architecture(&self) -> &str {
        &self.architecture
    }

    fn finish_sequence(&mut self) {
        self.shared.leave(self.slot);
    }
}
