//! The prefill sweeps: one step's ledger (held bytes attributed to the KV cache, the logits and
//! the rest, and the transient peak above them), the report's doubling and the batch sweep, and
//! the OOM diagnosis of the step that failed.

use crate::error::{LabError, Result};
use crate::estimate::{self, Workload};
use crate::experiments::oom;
use crate::memory::{fmt_bytes, guarded, tensor_bytes, Category, HeldBytes};
use crate::model::{Decoder, Logits};
use crate::session::Session;
use crate::stage::Outcome;
use candle_core::Tensor;
use std::time::Instant;

/// The report's sweep: 1024, 2048, … up to `max`.
pub fn doubling(start: usize, max: usize) -> Vec<usize> {
    std::iter::successors(Some(start.max(1)), |&n| Some(n * 2)).take_while(|&n| n <= max).collect()
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PrefillStep {
    pub precision: String,
    pub attention: String,
    pub logits: String,
    pub seq: usize,
    pub batch: usize,
    pub outcome: Outcome,
    /// Allocated before the step (the weights and whatever the runtime keeps).
    pub base: u64,
    /// Allocated after the step, the cache and logits still held.
    pub after: u64,
    pub peak: u64,
    pub reserved: u64,
    /// What the allocator had mapped at its busiest during the step (at the OOM, if one).
    pub reserved_peak: u64,
    /// Device memory of this process outside the pool (context, modules, workspaces).
    pub outside_pool: Option<u64>,
    /// Bytes of the cache tensors, and what the pool's allocated count rose by when it was made.
    pub kv_bytes: u64,
    pub kv_measured: u64,
    pub logits_bytes: u64,
    pub predicted_kv_gqa: u64,
    pub predicted_kv_naive: u64,
    pub predicted_logits: u64,
    pub seconds: f64,
    pub oom_request: Option<u64>,
    pub oom_during: String,
    /// A mixture's busiest expert: the most tokens one expert took in any layer (the prefill's
    /// peak is there); None for a dense model.
    pub busiest_expert: Option<u64>,
    /// The OOM as captured, for the diagnosis.
    #[serde(skip)]
    pub oom: Option<Box<crate::error::OomReport>>,
}

impl PrefillStep {
    /// Held after the step, above the base.
    pub fn held(&self) -> u64 {
        self.after.saturating_sub(self.base)
    }
    /// Held bytes neither the cache (as the pool measured it) nor the logits explain.
    pub fn other(&self) -> i64 {
        self.held() as i64 - self.kv_measured as i64 - self.logits_bytes as i64
    }
    /// How far the peak rose above what stayed held: attention scores, MLP activations.
    pub fn transient(&self) -> u64 {
        self.peak.saturating_sub(self.after)
    }
}

/// `batch` × `seq` random ids below 1000 (as the report draws them), seeded by `seed` and `seq`.
pub fn random_ids(batch: usize, seq: usize, vocab: usize, seed: u64, device: &candle_core::Device) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ seq as u64);
    // The report draws ids below 1000.
    let v: Vec<u32> = (0..batch * seq).map(|_| rng.random_range(0..vocab.min(1000) as u32)).collect();
    Ok(Tensor::from_vec(v, (batch, seq), device)?)
}

/// One prefill of `batch` × `seq` random ids from an empty cache, memory read before and after.
pub fn step(s: &Session, model: &Decoder, seq: usize, batch: usize, logits: Logits) -> PrefillStep {
    s.console.step(format!(
        "prefill {} {batch} × {seq}, {} logits, {} attention",
        model.precision,
        logits.name(),
        model.attention.name()
    ));
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let tokens = (seq * batch) as u64;
    let mut st = PrefillStep {
        precision: model.precision.name().into(),
        attention: model.attention.name().into(),
        logits: logits.name().into(),
        seq,
        batch,
        predicted_kv_gqa: estimate::kv_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
        predicted_kv_naive: estimate::naive_kv_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
        predicted_logits: match logits {
            Logits::All => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
            Logits::Last => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * batch as u64,
        },
        ..Default::default()
    };
    s.probe.clear_pending();
    s.probe.empty_cache();
    s.probe.reset_peak();
    crate::memory::alloc_hook::trace_mark(&format!(
        "prefill {} {batch} x {seq} {} logits {} attention",
        model.precision,
        logits.name(),
        model.attention.name()
    ));
    st.base = s.probe.snapshot("before").allocated;
    model.take_busiest();
    let t0 = Instant::now();
    let out = guarded(&s.probe, &format!("prefill of {batch} × {seq} tokens"), || {
        let ids = random_ids(batch, seq, model.cfg.vocab_size, s.opts.seed, model.device())?;
        let mut cache = model.new_cache(batch, seq)?;
        // The cache as the pool saw it being allocated, apart from the tensor arithmetic.
        let kv_measured = s.probe.snapshot("cache").allocated.saturating_sub(st.base);
        let logits = model.forward(&ids, &mut cache, logits)?;
        model.device().synchronize()?;
        let snap = s.probe.snapshot("after");
        let logits_bytes = tensor_bytes(&logits);
        Ok((snap, cache.bytes(), kv_measured, logits_bytes))
    });
    st.seconds = t0.elapsed().as_secs_f64();
    let busiest = model.take_busiest();
    st.busiest_expert = (model.cfg.experts().is_some() && st.outcome == Outcome::Ok).then_some(busiest as u64);
    match out {
        Ok((snap, kv, kv_measured, lg)) => {
            st.outcome = Outcome::Ok;
            st.after = snap.allocated;
            st.reserved = snap.reserved;
            st.peak = snap.peak;
            st.reserved_peak = snap.reserved_peak;
            st.outside_pool = snap.outside_pool();
            st.kv_bytes = kv;
            st.kv_measured = kv_measured;
            st.logits_bytes = lg;
        }
        Err(e) => {
            st.outcome = Outcome::from_error(&e);
            if let LabError::Oom(r) = e {
                st.oom_request = r.request_bytes;
                st.oom_during = r.during.clone();
                if let Some(snap) = &r.at {
                    st.peak = snap.peak;
                    st.reserved_peak = snap.reserved_peak;
                    st.outside_pool = snap.outside_pool();
                }
                st.oom = Some(r);
            }
        }
    }
    st
}

pub fn say_step(s: &mut Session, st: &PrefillStep) {
    s.say(format!(
        "prefill {} × {:>6} ({}, {} logits, {} attention): {} — held {}, peak {}, KV {} (GQA formula {}), logits {}, {:.2} s{}",
        st.batch,
        st.seq,
        st.precision,
        st.logits,
        st.attention,
        st.outcome.as_str(),
        fmt_bytes(st.held()),
        fmt_bytes(st.peak),
        fmt_bytes(st.kv_bytes),
        fmt_bytes(st.predicted_kv_gqa),
        fmt_bytes(st.logits_bytes),
        st.seconds,
        st.oom_request.map(|b| format!(", OOM asking for {}", fmt_bytes(b))).unwrap_or_default()
    ));
}

/// One short forward, so buffers the runtime keeps for good (cuBLAS workspace, candle's quantized
/// matmul workspace, CPU GEMM packing) are in the base before the first reading.
pub fn warm_up(model: &Decoder) {
    let _ = crate::model::generate::warmup(model, &[1, 2, 3, 4]);
}

/// Steps over `sizes` (a length at a fixed batch, or a batch at a fixed length) until the first
/// one that does not fit.
fn sweep(
    s: &mut Session,
    model: &Decoder,
    sizes: impl Iterator<Item = (usize, usize)>,
    logits: Logits,
    diagnoses: &mut Vec<oom::Diagnosis>,
) -> Result<Vec<PrefillStep>> {
    warm_up(model);
    let sizes: Vec<(usize, usize)> = sizes.collect();
    let pb = s.console.bar(sizes.len() as u64, &format!("{} sweep", model.precision), "steps");
    let mut steps = Vec::new();
    for (seq, batch) in sizes {
        s.check_stop()?;
        let st = step(s, model, seq, batch, logits);
        pb.inc(1);
        say_step(s, &st);
        let stop = !st.outcome.is_ok();
        steps.push(st);
        if stop {
            break;
        }
    }
    pb.finish_and_clear();
    diagnose_last(s, model, &steps, logits, diagnoses);
    Ok(steps)
}

/// The diagnosis of a sweep's OOM: what the failed step held and what would have made it fit,
/// with the transient per token of the last step that fitted.
fn diagnose_last(s: &Session, model: &Decoder, steps: &[PrefillStep], logits: Logits, out: &mut Vec<oom::Diagnosis>) {
    let Some(failed) = steps.last().filter(|st| st.outcome == Outcome::Oom) else { return };
    let Some(report) = &failed.oom else { return };
    let measured = steps
        .iter()
        .rev()
        .find(|st| st.outcome.is_ok())
        .map(|st| oom::Measured::from_step(st.base, st.peak, st.after, st.reserved_peak, st.seq * st.batch))
        .unwrap_or(oom::Measured { transient_per_token: 0.0, pool_factor: 1.0 });
    let held =
        HeldBytes::of(&[(Category::Weights, model.weight_bytes()), (Category::KvCache, failed.predicted_kv_gqa)]);
    let w = Workload { precision: model.precision, seq: failed.seq, batch: failed.batch, logits };
    let context = format!(
        "{} {} × {} ({} logits, {} attention)",
        failed.precision, failed.batch, failed.seq, failed.logits, failed.attention
    );
    out.extend(oom::diagnose(s, &context, report, &model.cfg, &w, &held, measured));
}

/// The report's prefill sweep on a loaded model: batch 1, `lengths` in order.
pub fn prefill_sweep(
    s: &mut Session,
    model: &Decoder,
    lengths: &[usize],
    logits: Logits,
    diagnoses: &mut Vec<oom::Diagnosis>,
) -> Result<Vec<PrefillStep>> {
    sweep(s, model, lengths.iter().map(|&n| (n, 1)), logits, diagnoses)
}

/// Batch 1, 2, 4, … at a fixed length.
pub fn batch_sweep(
    s: &mut Session,
    model: &Decoder,
    seq: usize,
    max_batch: usize,
    logits: Logits,
    diagnoses: &mut Vec<oom::Diagnosis>,
) -> Result<Vec<PrefillStep>> {
    let batches = std::iter::successors(Some(1usize), |b| Some(b * 2)).take_while(|&b| b <= max_batch);
    sweep(s, model, batches.map(|b| (seq, b)), logits, diagnoses)
}
