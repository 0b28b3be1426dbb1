//! One device's training step: the steps run and measured, each setting's rows beside the lab's
//! formula and the articles', the formula's need when the F32 weights do not load, and the check
//! that a step could fit the device at all.

use super::tables::{scale_table, ItemRow, SCALE};
use crate::error::Result;
use crate::estimate::training::{self, articles_activations, step_activations, step_peak, TrainSetup, TrainShape};
use crate::experiments::kv::random_ids;
use crate::memory::{fmt_bytes, guarded, mib};
use crate::model::train::optim::AdamW;
use crate::model::{train, Decoder, DecoderConfig};
use crate::session::Session;
use crate::stage::{Finding, StageOutput};

/// What one setting's last step measured, bytes.
#[derive(Default)]
pub(super) struct Measured {
    forward: u64,
    gradients: u64,
    /// Peaks above weights and states: forward and backward, then AdamW's update.
    backward_peak: u64,
    optimizer_peak: u64,
    loss: f32,
    seconds: f64,
}

/// `steps` steps of forward, backward and AdamW on `sh`; memory relative to `base` (weights and states).
pub(super) fn run_steps(
    s: &Session,
    model: &Decoder,
    opt: &mut AdamW,
    sh: TrainShape,
    steps: usize,
    checkpoint: bool,
) -> Result<Measured> {
    let mut m = Measured::default();
    for step in 0..steps {
        let ids = random_ids(sh.batch, sh.seq + 1, model.cfg.vocab_size, 11 + step as u64, model.device())?;
        let (input, target) = train::shift(&ids)?;
        drop(ids);
        model.device().synchronize()?;
        let base = s.probe.snapshot("before").allocated;
        s.probe.reset_peak();
        let t = std::time::Instant::now();
        let mut forward = 0;
        let grads = guarded(&s.probe, "training step", || {
            let g = train::gradients(model, &input, &target, checkpoint, &mut || {
                let _ = model.device().synchronize();
                forward = s.probe.snapshot("forward").allocated.saturating_sub(base);
            })?;
            model.device().synchronize()?;
            Ok(g)
        })?;
        let after = s.probe.snapshot("backward");
        s.probe.reset_peak();
        guarded(&s.probe, "AdamW step", || opt.step(&grads.grads))?;
        model.device().synchronize()?;
        let end = s.probe.snapshot("step");
        m = Measured {
            forward,
            gradients: after.allocated.saturating_sub(base),
            backward_peak: after.peak.saturating_sub(base),
            optimizer_peak: end.peak.saturating_sub(base),
            loss: grads.loss,
            seconds: t.elapsed().as_secs_f64(),
        };
        drop(grads);
    }
    Ok(m)
}

/// One setting's rows: each item measured beside the lab's formula and the articles'.
pub(super) fn rows_for(
    model_cfg: &DecoderConfig,
    params: u64,
    sh: TrainShape,
    checkpoint: bool,
    weights: u64,
    states: u64,
    step: &std::result::Result<Measured, String>,
) -> Vec<ItemRow> {
    let (m, oom) = (step.as_ref().ok(), step.as_ref().err().cloned());
    let lab = step_activations(model_cfg, params, sh, checkpoint);
    let ledger = training::ledger(params, &TrainSetup::fp32_adam());
    let art = articles_activations(model_cfg, sh, checkpoint);
    let note =
        oom.unwrap_or_else(|| m.map(|m| format!("loss {:.3}, {:.2} s a step", m.loss, m.seconds)).unwrap_or_default());
    vec![
        ItemRow { checkpointing: checkpoint, item: "weights", measured: Some(weights), lab: ledger.weights, articles: Some(ledger.weights), note: "F32 Vars".into() },
        ItemRow { checkpointing: checkpoint, item: "optimizer states", measured: Some(states), lab: ledger.optimizer, articles: Some(ledger.optimizer), note: "AdamW: two F32 moments".into() },
        ItemRow { checkpointing: checkpoint, item: "gradients", measured: m.map(|m| m.gradients), lab: lab.gradients, articles: Some(ledger.gradients), note: "held after the backward".into() },
        ItemRow { checkpointing: checkpoint, item: "kept by the forward", measured: m.map(|m| m.forward), lab: lab.forward, articles: Some(art), note: if checkpoint { "each layer's input".into() } else { "the whole graph".into() } },
        ItemRow { checkpointing: checkpoint, item: "backward peak above weights + states", measured: m.map(|m| m.backward_peak), lab: lab.peak, articles: Some(ledger.gradients + art), note: format!("lab: at the {}", lab.phase) },
        ItemRow { checkpointing: checkpoint, item: "AdamW update peak above weights + states", measured: m.map(|m| m.optimizer_peak), lab: lab.optimizer_peak, articles: None, note: "the gradients and 3 tensors the size of the largest weight (the lab's AdamW updates in place; candle_nn's, which records the update's ops, held 14)".into() },
        ItemRow { checkpointing: checkpoint, item: "step peak", measured: m.map(|m| weights + states + m.backward_peak.max(m.optimizer_peak)), lab: ledger.weights + ledger.optimizer + lab.above_states(), articles: Some(ledger.total() + art), note },
    ]
}

/// The step's need by the formula (weights, states and the peak above them, with and without
/// checkpointing) when the F32 weights alone did not load, and the 7B scale table.
pub(super) fn too_large(s: &mut Session, cfg: &DecoderConfig, sh: TrainShape, oom: &str) -> Result<StageOutput> {
    let p = cfg.param_count() as u64;
    let mut out = StageOutput::default();
    s.say(format!(
        "the model does not fit in F32 for training ({oom}); the formula's need is reported instead (smaller presets train: --model synthetic:qwen2.5-0.5b)"
    ));
    for ckpt in [false, true] {
        let need = step_peak(cfg, p, sh, ckpt);
        out.findings.push(
            Finding::new(format!("training step peak, checkpointing {}", if ckpt { "on" } else { "off" }), "MiB", None)
                .predicted(mib(need))
                .note(format!("OOM loading the F32 weights: {oom}")),
        );
    }
    out.table(SCALE, scale_table(sh)?);
    Ok(out)
}

/// Why a step needing `above` bytes above weights and states on each of `ranks` ranks sharing
/// this device is not run: more than the device's whole memory (the card, or the host's memory on
/// the CPU) could never be measured, and asking for it (4 TiB at the --seq and --batch ceilings)
/// aborts the process instead of failing.
pub(super) fn beyond_device(s: &Session, above: u64, ranks: u64) -> Option<String> {
    let snap = s.probe.snapshot("room");
    let total = snap.device_total?;
    let need = above.saturating_mul(ranks).saturating_add(snap.allocated);
    (need > total).then(|| {
        format!(
            "not run: the step needs {} by the lab's formula, more than the {} this device has",
            fmt_bytes(need),
            fmt_bytes(total)
        )
    })
}
