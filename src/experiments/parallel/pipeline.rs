//! The pipeline layout of the parallel stage: whole layers per GPU (`model::parallel::pipeline`,
//! split by the estimator's `pipeline_split`, or as llama.cpp splits them given shares), one thread
//! driving the stages in turn; every GPU's weights and generation peak read from its own device
//! beside the ledger (`estimate --pp N`, `plan --cards`).

use super::ranks::Request;
use super::tables::GpuRow;
use crate::error::Result;
use crate::estimate::fit::Inference;
use crate::estimate::parallel::{llamacpp_split, pipeline, pipeline_llamacpp};
use crate::hw::{self, Card};
use crate::memory::{guarded, MemoryProbe};
use crate::model::layers::attention::AttentionMode;
use crate::model::parallel::pipeline::{load_pipeline, Ends};
use crate::model::parallel::rank_ledger;
use crate::model::source;
use crate::model::{generate, Logits};
use crate::stage::Outcome;
use candle_core::Device;

fn snapshots(probes: &[MemoryProbe]) -> Result<Vec<crate::memory::Snapshot>> {
    probes.iter().map(|p| p.settled("")).collect()
}

/// One row per stage, measured on its device (GPUs; the CPU's stages share one heap: none) beside
/// the ledger, the greedy tokens (none after an OOM) and the OOM's line. The KV cache per stage is the measured
/// whole cache's share by layers (every layer's is the same size). `shares`: llama.cpp's
/// placement with these shares of the layers (the embedding in host memory); None: the lab's.
/// `cards`: the card each stage's GPU emulates (none: the whole GPUs; the CPU's stages share one
/// heap, where the cards are only planned).
pub fn run(
    r: &Request,
    devices: Vec<Device>,
    shares: Option<&[f64]>,
    cards: &[Card],
) -> Result<(Vec<GpuRow>, Vec<u32>, Option<String>)> {
    let n = devices.len();
    let layout = match shares {
        Some(s) => format!("pipeline × {n}, llama.cpp split {s:?}"),
        None => format!("pipeline × {n}"),
    };
    let w = Inference {
        precision: r.precision,
        seq: r.prompt.len(),
        batch: 1,
        logits: Logits::Last,
        attention: AttentionMode::default(),
        stored: None,
        allocator: Default::default(),
    };
    let (need, ends) = match shares {
        Some(s) => (
            pipeline_llamacpp(r.cfg, &w, s, 0)?,
            Ends { embed: None, head: llamacpp_split(r.cfg.num_hidden_layers, s)?.1 },
        ),
        None => (pipeline(r.cfg, &w, n, 0)?, Ends::first_and_last(n)),
    };
    let split: Vec<(usize, usize)> = need.iter().map(|g| g.layers).collect();
    let layers = r.cfg.num_hidden_layers as u64;
    let dtype = r.precision.dense_dtype().map(|d| d.size_in_bytes() as u64).unwrap_or(2);
    let kv_all = rank_ledger(
        r.cfg,
        1,
        dtype,
        (r.prompt.len() + r.gen.max_new_tokens) as u64,
        r.precision.act_dtype().size_in_bytes() as u64,
    )?
    .kv_cache;
    let predicted: Vec<GpuRow> = need
        .iter()
        .map(|g| {
            let kv = kv_all * (g.layers.1 - g.layers.0) as u64 / layers;
            GpuRow {
                layout: layout.clone(),
                rank: g.gpu,
                device: hw::describe_as(&devices[g.gpu], cards.get(g.gpu)),
                weights_predicted: g.weights,
                kv_predicted: kv,
                peak_above_predicted: kv + g.transient + g.logits,
                ..Default::default()
            }
        })
        .collect();
    let mut probes: Vec<MemoryProbe> = devices.iter().map(MemoryProbe::new).collect();
    let cuda = devices[0].is_cuda();
    if cuda {
        for (p, c) in probes.iter_mut().zip(cards) {
            p.emulate(c)?;
        }
    }
    let before = snapshots(&probes)?;
    let run = guarded(&probes[0], "the pipeline", || {
        let mut weights = source::open(r.source, r.opts)?.weights;
        let model = load_pipeline(r.cfg, r.precision, weights.as_mut(), &devices, &split, ends, &probes)?;
        let loaded = snapshots(&probes)?;
        probes.iter().for_each(|p| p.reset_peak());
        let g = generate(&model, r.prompt, &r.gen)?;
        let done = snapshots(&probes)?;
        Ok((loaded, done, g))
    });
    let (loaded, done, g) = match run {
        Ok(x) => x,
        Err(e @ crate::error::LabError::Oom(_)) => {
            let outcome = Outcome::from_error(&e).as_str();
            let rows = predicted.into_iter().map(|p| GpuRow { outcome: outcome.clone(), ..p }).collect();
            // Every GPU's state at the OOM: the error names the first GPU's probe, whichever ran out.
            let each: Vec<String> = probes
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let s = p.snapshot("oom");
                    let free = s.device_free.map_or("—".into(), |f| format!("{:.1}", crate::memory::mib(f)));
                    format!(
                        "GPU {i}: {:.1} MiB held, peak {:.1}, pool {:.1}, free {free}",
                        crate::memory::mib(s.allocated),
                        crate::memory::mib(s.peak),
                        crate::memory::mib(s.reserved)
                    )
                })
                .collect();
            return Ok((rows, vec![], Some(format!("{e} ({})", each.join("; ")))));
        }
        Err(e) => return Err(e),
    };
    let rows = predicted
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let share = (split[i].1 - split[i].0) as u64;
            GpuRow {
                weights: cuda.then(|| loaded[i].allocated.saturating_sub(before[i].allocated)),
                kv_cache: Some(g.kv_cache_bytes * share / layers),
                peak_above_weights: cuda.then(|| done[i].peak.saturating_sub(loaded[i].allocated)),
                prefill_tok_s: Some(g.prefill_tok_s()),
                decode_tok_s: Some(g.decode_tok_s()),
                tokens: g.generated_ids.len(),
                outcome: Outcome::OK.into(),
                ..p
            }
        })
        .collect();
    Ok((rows, g.generated_ids, None))
}
