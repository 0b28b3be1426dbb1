//! `vram-lab parity`: does this build compute on this card what the CPU computes in F32? Each
//! precision's model, loaded on the session's device, beside the same weights on the CPU widened
//! to F32 (a quantized block dequantized), on the same tokens (`model::generate::parity`): the
//! share of positions whose top-1 ids agree and the largest logit difference. What differs is the
//! device's arithmetic alone (its kernels, its 16-bit activations), not the weights' rounding. A
//! course's card and its build (compute 8.9 or 8.6) are judged by it (`scripts/course-check.sh`).

use crate::error::{LabError, Result};
use crate::hw;
use crate::limits;
use crate::memory::{guarded, MemoryProbe};
use crate::model::generate::parity::{teacher_forced, Parity};
use crate::model::generate::seeded_ids;
use crate::model::load::weights::{load_all, Weight};
use crate::model::Decoder;
use crate::model::{self, ModelSource, Precision};
use crate::session::{default_model, SessionArgs};
use candle_core::{DType, Device};

#[derive(clap::Args, Debug, Clone)]
pub struct ParityArgs {
    /// The precisions compared, each loaded on the session's device beside its weights in F32 on the CPU
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Precision::F32, Precision::Bf16, Precision::Q4KM])]
    pub precisions: Vec<Precision>,
    /// The prompt's token ids (comma separated); without them, --prompt-len seeded ids
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// Seeded prompt ids when --prompt-ids is not given: 300 take BF16's flash-attention prefill
    #[arg(long, default_value_t = 300, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt_len: usize,
    /// Positions compared: the prompt's last, then each token the reference picks
    #[arg(long, default_value_t = 48, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub steps: usize,
    /// Print one JSON object, every position included
    #[arg(long)]
    pub json: bool,
}

/// Each precision in turn, on the device and widened on the CPU; returns what to print.
pub fn parity(args: &SessionArgs, p: &ParityArgs) -> Result<String> {
    if let Some((_, twice)) = p.precisions.iter().enumerate().find(|(i, x)| p.precisions[..*i].contains(x)) {
        return Err(LabError::input(format!("--precisions lists {} twice", twice.name())));
    }
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut probe = MemoryProbe::new(&device);
    if let Some(card) = args.card_for(&device, &source, false)?.0 {
        probe.emulate(&card)?;
    }
    let mut rows = Vec::new();
    for &precision in &p.precisions {
        let precision = precision.with_compute(args.compute);
        let lm = guarded(&probe, "loading", || {
            model::source::load(&source, &args.source_options(), precision, &device, &probe, None)
        })?;
        let reference = widened_on_cpu(&source, args, precision)?;
        let prompt = match &p.prompt_ids {
            Some(ids) => ids.clone(),
            None => seeded_ids(p.prompt_len, reference.cfg.vocab_size, args.seed),
        };
        let found = guarded(&probe, "comparing", || teacher_forced(&reference, &lm.model, &prompt, p.steps))?;
        rows.push((precision, prompt.len(), found));
    }
    let device_name = hw::describe(&device);
    if p.json {
        return Ok(serde_json::json!({
            "model": source.label(),
            "reference": "f32 on the cpu",
            "device": device_name,
            "built_for_compute": built_for(),
            "prompt_len": rows.first().map(|r| r.1),
            "precisions": rows.iter().map(|(precision, _, r)| serde_json::json!({
                "precision": precision.name(),
                "top1_agreement": r.top1_agreement(),
                "largest_diff": r.largest_diff(),
                "largest_relative": r.largest_relative(),
                "positions": r.positions,
            })).collect::<Vec<_>>(),
        })
        .to_string());
    }
    let mut lines = vec![format!(
        "{} on {device_name} (built for compute {}), beside its weights in F32 on the CPU: {} prompt ids, {} positions",
        source.label(),
        built_for().map_or("any".into(), |c| format!("{}.{}", c / 10, c % 10)),
        rows.first().map_or(0, |r| r.1),
        p.steps
    )];
    lines.push(format!("{:<8} {:>14} {:>14} {:>18}", "", "top-1 agree", "largest |Δ|", "largest |Δ| / max"));
    for (precision, _, r) in &rows {
        lines.push(line(precision, r));
    }
    Ok(lines.join("\n"))
}

/// The model `precision` loads, its weights on the CPU in F32: what the device's logits are read
/// against.
fn widened_on_cpu(source: &ModelSource, args: &SessionArgs, precision: Precision) -> Result<Decoder> {
    let mut opened = model::source::open(source, &args.source_options())?;
    let weights = load_all(&opened.cfg, opened.weights.as_mut(), precision, &Device::Cpu, None, |_, _| Ok(()))?;
    let widened = weights
        .into_iter()
        .map(|(name, w)| Ok((name, Weight::Dense(w.dense()?.to_dtype(DType::F32)?))))
        .collect::<Result<_>>()?;
    Decoder::new(&opened.cfg, Precision::F32, widened, &Device::Cpu)
}

fn line(precision: &Precision, r: &Parity) -> String {
    format!(
        "{:<8} {:>14} {:>14.4} {:>18.4}",
        precision.name(),
        format!("{}/{}", r.agreeing(), r.positions.len()),
        r.largest_diff(),
        r.largest_relative()
    )
}

/// The compute capability the build names (`CUDA_COMPUTE_CAP`); None on a CPU build.
fn built_for() -> Option<u32> {
    #[cfg(feature = "cuda")]
    return crate::model::kernels::target::built_for();
    #[cfg(not(feature = "cuda"))]
    None
}
