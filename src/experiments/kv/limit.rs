//! The longest context that fits: bisection between the last length that fitted and the first
//! that did not.

use super::sweep::{say_step, step, PrefillStep};
use crate::error::Result;
use crate::model::{Decoder, Logits};
use crate::search::bisect;
use crate::session::Session;
use crate::stage::Outcome;

/// The longest prefill that fits on this (emulated) card.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContextLimit {
    pub precision: String,
    pub attention: String,
    pub logits: Logits,
    pub batch: usize,
    pub max_ok: usize,
    pub first_oom: usize,
    pub resolution: usize,
    pub trials: Vec<PrefillStep>,
    /// Whether a failed request was retried after a trim (the allocation hook, on a GPU).
    pub oom_retry: bool,
}

/// After a sweep that ended in an OOM, finds the longest prefill that fits to within `resolution`.
pub fn find_limit(
    s: &mut Session,
    model: &Decoder,
    sweep: &[PrefillStep],
    logits: Logits,
    resolution: usize,
) -> Result<Option<ContextLimit>> {
    let Some(oom) = sweep.iter().find(|st| st.outcome == Outcome::Oom) else { return Ok(None) };
    let ok = sweep.iter().filter(|st| st.outcome.is_ok() && st.seq < oom.seq).map(|st| st.seq).max().unwrap_or(0);
    let batch = oom.batch;
    let mut trials = Vec::new();
    let (max_ok, _) = bisect(ok as u64, oom.seq as u64, resolution as u64, |n| {
        s.check_stop()?;
        let st = step(s, model, n as usize, batch, logits);
        say_step(s, &st);
        let fits = st.outcome.is_ok();
        trials.push(st);
        Ok(fits)
    })?;
    let first_oom = trials.iter().filter(|st| !st.outcome.is_ok()).map(|st| st.seq).min().unwrap_or(oom.seq);
    Ok(Some(ContextLimit {
        precision: model.precision.name().into(),
        attention: model.attention.name().into(),
        logits,
        batch,
        max_ok: max_ok as usize,
        first_oom,
        resolution,
        trials,
        oom_retry: crate::memory::alloc_hook::active() && crate::memory::alloc_hook::retry_enabled(),
    }))
}
