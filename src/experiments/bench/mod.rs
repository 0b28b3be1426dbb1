//! Speed: prefill and decode timed on the lab's loop, each beside its physical ceiling (the read
//! kernel's bandwidth measured in this run ÷ the bytes a step reads), the PyTorch original run on
//! the same GPU in the same call (`scripts/reference/pytorch_reference.py bench`), and the other
//! stacks' H200 figures. Variants of the loop (`--variants`) are measured side by side, so each
//! speed-up is a before and an after from one process.

mod peers;
mod rows;
pub mod tables;

use crate::error::{LabError, Result};
use crate::estimate::{self, fit};
use crate::model::generate::{self, DecodeTiming};
use crate::model::{AttentionMode, Decoder, Logits, Precision};
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use crate::{limits, reference};
use peers::{other_stack, pytorch};
use polars::prelude::*;
pub use rows::Variant;
use rows::{same_ids, DecodeRow, PrefillRow};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tables::{col, DECODE_TABLE, PREFILL_TABLE};

pub struct Bench;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct BenchConfig {
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = BenchConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Prefill lengths timed (last-token logits)
    #[arg(long, value_delimiter = ',', default_values_t = BenchConfig::default().prompt_lens, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt_lens: Vec<usize>,
    /// Decoding steps timed per repeat
    #[arg(long, default_value_t = BenchConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// The prompt before decoding, tokens
    #[arg(long, default_value_t = BenchConfig::default().decode_prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub decode_prompt: usize,
    /// Timed repeats (after one warm-up); the median is reported
    #[arg(long, default_value_t = BenchConfig::default().repeats, value_parser = limits::count(limits::MAX_REPEATS))]
    pub repeats: usize,
    /// Batch sizes decoded (besides batch 1), e.g. 2,4,8,16,32,64
    #[arg(long, value_delimiter = ',', value_parser = limits::count(limits::MAX_BATCH))]
    pub batches: Vec<usize>,
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = BenchConfig::default().variants)]
    pub variants: Vec<Variant>,
    /// JSON lines of `scripts/reference/pytorch_reference.py bench` run on the same GPU
    #[arg(long)]
    pub pytorch: Option<PathBuf>,
    /// JSON lines of llama.cpp's `llama-bench -o jsonl` run on the same GPU
    /// (`scripts/reference/llama_bench.sh`); without it the other stack's figures are llama.cpp's
    /// earlier H200 run, labelled so
    #[arg(long)]
    pub llama_cpp: Option<PathBuf>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            precisions: vec![Precision::Bf16, Precision::Q4KM],
            prompt_lens: vec![512, 32768],
            new_tokens: 128,
            decode_prompt: 32,
            repeats: 3,
            batches: Vec::new(),
            variants: vec![
                Variant::Separate,
                Variant::Untracked,
                Variant::Fused,
                Variant::Graph,
                Variant::Kernel,
                Variant::Gemv,
                Variant::Own,
            ],
            pytorch: None,
            llama_cpp: None,
        }
    }
}

impl BenchConfig {
    /// The mean context of the timed decoding steps: the cache a step reads, on average.
    fn mean_context(&self) -> usize {
        self.decode_prompt + self.new_tokens / 2
    }
}

/// Runs `f`, turning an OOM into an outcome (the next measurement still runs).
fn outcome_of<T>(r: Result<T>) -> Result<(Outcome, Option<T>)> {
    match r {
        Ok(v) => Ok((Outcome::Ok, Some(v))),
        Err(e @ LabError::Interrupted) => Err(e),
        Err(e) => Ok((Outcome::from_error(&e), None)),
    }
}

/// What the stage has measured so far.
#[derive(Default)]
struct Rows {
    decodes: Vec<DecodeRow>,
    prefills: Vec<PrefillRow>,
    /// The longest prefill this process ran so far (candle's quantized-matmul buffer only grows,
    /// and it outlives the models).
    seen: u64,
}

/// One precision in one variant, its rows added to `rows`.
fn bench_model(
    s: &mut Session,
    c: &BenchConfig,
    model: &Decoder,
    base: u64,
    (p, v): (Precision, Variant),
    rows: &mut Rows,
) -> Result<()> {
    let Rows { decodes, prefills, seen } = rows;
    let cfg = model.cfg.clone();
    // Warm-up: kernels loaded, cuBLAS handles made, the pool grown once.
    generate::time_decode(model, 1, 8, 2, 0)?;
    let mut batches = vec![1];
    batches.extend(c.batches.iter().copied().filter(|&b| b > 1));
    for &b in &batches {
        s.check_stop()?;
        s.console.step(format!("{p} {}: decode, batch {b}", v.name()));
        let mut pooled = DecodeTiming { batch: b, prompt: c.decode_prompt, ..Default::default() };
        let mut outcome = Outcome::Ok;
        for r in 0..c.repeats.max(1) {
            let timed = match v.own_kernels() {
                Some(own) => generate::time_decode_graph(model, b, c.decode_prompt, c.new_tokens, r as u64, own),
                None => generate::time_decode(model, b, c.decode_prompt, c.new_tokens, r as u64),
            };
            let (o, t) = outcome_of(timed)?;
            outcome = o;
            match t {
                Some(t) => {
                    if r == 0 {
                        pooled.ids = t.ids.clone();
                    }
                    pooled.prefill_s = t.prefill_s;
                    pooled.issue_s.extend(t.issue_s);
                    pooled.step_s.extend(t.step_s);
                }
                None => break,
            }
        }
        let row = DecodeRow {
            precision: p,
            variant: v,
            batch: b,
            outcome,
            read_bytes: estimate::decode_read_bytes(&cfg, p, c.mean_context(), b),
            timing: pooled,
        };
        s.say(match &row.outcome {
            Outcome::Ok => format!(
                "{p} {} batch {b}: {:.1} tok/s, {:.2} ms/step ({:.2} ms to issue)",
                v.name(),
                row.timing.tok_s(),
                1e3 * row.timing.step_median_s(),
                1e3 * row.timing.issue_median_s()
            ),
            other => format!("{p} {} batch {b}: {}", v.name(), other.as_str()),
        });
        decodes.push(row);
    }
    // The decodes' prefills ran through the same quantized products.
    *seen = (*seen).max((batches.iter().max().copied().unwrap_or(1) * c.decode_prompt) as u64);
    // A captured graph changes decoding only: its prefill is the fused variant's, unless its
    // attention is the fused kernel (`own` where it runs).
    let lens: &[usize] =
        if v.own_kernels().is_some() && model.attention != AttentionMode::Flash { &[] } else { &c.prompt_lens };
    for &seq in lens {
        s.check_stop()?;
        s.console.step(format!("{p} {}: prefill of {seq}", v.name()));
        s.probe.reset_peak();
        let mut times = Vec::new();
        let mut outcome = Outcome::Ok;
        // The repeats on the memory the first one mapped, as PyTorch's bench times its prefills on
        // its caching allocator's blocks after a warm-up (the median leaves the first out).
        #[cfg(feature = "cuda")]
        let _kept = match &s.device {
            candle_core::Device::Cuda(d) => Some(crate::memory::cuda::KeptPool::new(d)?),
            _ => None,
        };
        for r in 0..c.repeats.max(1) {
            let (o, t) = outcome_of(generate::time_prefill(model, 1, seq, Logits::Last, r as u64))?;
            outcome = o;
            match t {
                Some(t) => times.push(t),
                None => break,
            }
        }
        // Above what the process held before the model was loaded, as the ledger counts.
        let peak = s.probe.snapshot(&format!("{p} prefill {seq}")).peak.saturating_sub(base);
        let w = fit::Inference {
            precision: p,
            seq,
            batch: 1,
            logits: Logits::Last,
            attention: model.attention,
            stored: None,
            allocator: Default::default(),
        };
        let mut ledger = fit::ledger_after(&cfg, &w, 0, *seen);
        *seen = (*seen).max(seq as u64);
        if !s.device.is_cuda() {
            // candle's quantized-matmul buffer is a CUDA one.
            ledger.workspace = 0;
        }
        let ledger_peak = ledger.peak();
        let seconds = generate::median(&times);
        s.say(format!(
            "{p} {} prefill {seq}: {:.0} tok/s, peak {:.0} MiB (ledger {:.0})",
            v.name(),
            seq as f64 / seconds,
            crate::memory::mib(peak),
            crate::memory::mib(ledger_peak)
        ));
        prefills.push(PrefillRow { precision: p, variant: v, seq, outcome, seconds, peak, ledger_peak });
    }
    Ok(())
}

impl Stage for Bench {
    const NAME: &'static str = "bench";
    const TITLE: &'static str = "Speed — prefill and decode beside their ceilings / 速度";
    const ABOUT: &'static str = "Prefill and decode tok/s of the lab's loop per precision and variant, beside the bandwidth ceiling, PyTorch and llama.cpp";
    const INTRO: &'static str = "批大小为 1 的解码每个 token 都要把权重读一遍:上限 = 显存读带宽 ÷ 每步读取的字节。<br>Batch-1 decoding reads every weight once per token, so its ceiling is the device's read bandwidth (the read kernel, measured in this run) ÷ the bytes a step reads (the weights but the embedding table, plus the KV cache). Each decode and prefill figure stands beside that ceiling, the PyTorch original run on the same GPU in the same call, and llama.cpp's H200 figures. ms to issue is the time the host takes to launch a step's kernels: when it is close to the whole step, the GPU waits on the host.";
    type Config = BenchConfig;

    /// Three loops (the plain one, the CUDA graph, the lab's own kernels), 64 new tokens, the
    /// 512-token prefill, two repeats: the other loops and the 32k prefill are `--full`'s.
    fn quick_config() -> BenchConfig {
        BenchConfig {
            prompt_lens: vec![512],
            repeats: 2,
            new_tokens: 64,
            variants: vec![Variant::Separate, Variant::Graph, Variant::Own],
            ..Default::default()
        }
    }

    fn cpu_config() -> BenchConfig {
        BenchConfig { prompt_lens: vec![64], new_tokens: 8, decode_prompt: 8, repeats: 2, ..Default::default() }
    }

    fn run(s: &mut Session, c: &BenchConfig) -> Result<StageOutput> {
        let bw = s.bandwidths()?.device;
        let records = match &c.pytorch {
            Some(p) => reference::pytorch_records(p, "bench")?,
            None => Vec::new(),
        };
        let llama = c.llama_cpp.as_deref().map(reference::llamacpp_records).transpose()?;
        let mut rows = Rows::default();
        let mut report_model = false;
        for &p in &c.precisions {
            for &v in &c.variants {
                s.check_stop()?;
                let base = s.probe.snapshot(&format!("{p} {}: before loading", v.name())).allocated;
                // The tensors made while it is on (the weights, every step's) carry events.
                crate::hw::set_event_tracking(&s.device, v == Variant::Separate);
                let mut model = match s.load(p) {
                    Ok(lm) => lm.model,
                    Err(e @ LabError::Interrupted) => return Err(e),
                    Err(e) => {
                        // A precision that does not load (an OOM on a small card) is a row of the
                        // table, so the run says why it has no speed; the next precision still runs.
                        s.say(format!("{p}: not loaded ({e})"));
                        let cfg = crate::model::source::open(&s.source, &s.opts)?.cfg;
                        let read_bytes = estimate::decode_read_bytes(&cfg, p, c.mean_context(), 1);
                        let timing = DecodeTiming { batch: 1, prompt: c.decode_prompt, ..Default::default() };
                        rows.decodes.push(DecodeRow {
                            precision: p,
                            variant: v,
                            batch: 1,
                            outcome: Outcome::from_error(&e),
                            timing,
                            read_bytes,
                        });
                        break;
                    }
                };
                report_model = reference::is_report_model(&model.cfg);
                let stacked =
                    if v == Variant::Separate || v == Variant::Untracked { 0 } else { model.fuse_projections()? };
                if v == Variant::Own && model.flash_runs() {
                    model.attention = AttentionMode::Flash;
                }
                if v == Variant::Fused && stacked == 0 {
                    s.say(format!("{p}: no dense layer to fuse (quantized weights keep five products)"));
                    continue;
                }
                let measured = bench_model(s, c, &model, base, (p, v), &mut rows);
                crate::hw::set_event_tracking(&s.device, false);
                measured?;
            }
        }
        let Rows { decodes, prefills, .. } = rows;
        // llama.cpp's earlier figures were measured on an H200: beside this run's only on one (a ratio
        // to another GPU's figure says nothing); elsewhere `--llama-cpp` brings the same call's.
        let on_h200 = s.device.is_cuda() && report_model && crate::hw::describe(&s.device).contains("H200");
        let ok_f = |o: &Outcome, v: f64| o.is_ok().then_some(v);
        let dec_tok: Vec<Option<f64>> = decodes.iter().map(|r| ok_f(&r.outcome, r.timing.tok_s())).collect();
        let dec_ceiling: Vec<f64> =
            decodes.iter().map(|r| r.batch as f64 * estimate::decode_ceiling_tok_s(bw, r.read_bytes)).collect();
        let dec_torch: Vec<Option<f64>> = decodes
            .iter()
            .map(|r| if r.batch == 1 { pytorch(&records, "decode", r.precision, None) } else { None })
            .collect();
        let dec_other: Vec<(Option<f64>, String)> = decodes
            .iter()
            .map(|r| {
                if r.batch == 1 {
                    other_stack(llama.as_deref(), r.precision, None, on_h200)
                } else {
                    (None, String::new())
                }
            })
            .collect();
        let decode_df = df!(
            col::PRECISION => decodes.iter().map(|r| r.precision.name()).collect::<Vec<_>>(),
            col::VARIANT => decodes.iter().map(|r| r.variant.name()).collect::<Vec<_>>(),
            col::BATCH => decodes.iter().map(|r| r.batch as u64).collect::<Vec<_>>(),
            col::OUTCOME => decodes.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
            col::MS_PER_STEP => decodes.iter().map(|r| ok_f(&r.outcome, 1e3 * r.timing.step_median_s())).collect::<Vec<_>>(),
            col::ISSUE_MS => decodes.iter().map(|r| ok_f(&r.outcome, 1e3 * r.timing.issue_median_s())).collect::<Vec<_>>(),
            col::TOK_S => dec_tok.clone(),
            col::READ_GB => decodes.iter().map(|r| r.read_bytes as f64 / 1e9).collect::<Vec<_>>(),
            col::CEILING_TOK_S => dec_ceiling.clone(),
            col::PCT_CEILING => dec_tok.iter().zip(&dec_ceiling).map(|(t, c)| t.map(|t| 100.0 * t / c)).collect::<Vec<_>>(),
            col::PYTORCH_TOK_S => dec_torch.clone(),
            col::VS_PYTORCH => dec_tok.iter().zip(&dec_torch).map(|(a, b)| a.zip(*b).map(|(a, b)| a / b)).collect::<Vec<_>>(),
            col::OTHER_TOK_S => dec_other.iter().map(|o| o.0).collect::<Vec<_>>(),
            col::VS_OTHER => dec_tok.iter().zip(&dec_other).map(|(a, b)| a.zip(b.0).map(|(a, b)| a / b)).collect::<Vec<_>>(),
            col::OTHER => dec_other.iter().map(|o| o.1.as_str()).collect::<Vec<_>>(),
            col::SAME_IDS => decodes.iter().map(|r| same_ids(r, &decodes)).collect::<Vec<_>>(),
        )?;
        let pre_tok: Vec<Option<f64>> = prefills.iter().map(|r| ok_f(&r.outcome, r.seq as f64 / r.seconds)).collect();
        let pre_torch: Vec<Option<f64>> =
            prefills.iter().map(|r| pytorch(&records, "prefill", r.precision, Some(r.seq))).collect();
        let pre_other: Vec<(Option<f64>, String)> = prefills
            .iter()
            .map(|r| other_stack(llama.as_deref(), r.precision, Some(r.seq), on_h200 && r.seq <= 512))
            .collect();
        let prefill_df = df!(
            col::PRECISION => prefills.iter().map(|r| r.precision.name()).collect::<Vec<_>>(),
            col::VARIANT => prefills.iter().map(|r| r.variant.name()).collect::<Vec<_>>(),
            col::SEQ => prefills.iter().map(|r| r.seq as u64).collect::<Vec<_>>(),
            col::OUTCOME => prefills.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
            col::TOK_S => pre_tok.clone(),
            col::PEAK_MIB => prefills.iter().map(|r| crate::memory::mib(r.peak)).collect::<Vec<_>>(),
            col::LEDGER_PEAK_MIB => prefills.iter().map(|r| crate::memory::mib(r.ledger_peak)).collect::<Vec<_>>(),
            col::PYTORCH_TOK_S => pre_torch.clone(),
            col::VS_PYTORCH => pre_tok.iter().zip(&pre_torch).map(|(a, b)| a.zip(*b).map(|(a, b)| a / b)).collect::<Vec<_>>(),
            col::OTHER_TOK_S => pre_other.iter().map(|o| o.0).collect::<Vec<_>>(),
            col::VS_OTHER => pre_tok.iter().zip(&pre_other).map(|(a, b)| a.zip(b.0).map(|(a, b)| a / b)).collect::<Vec<_>>(),
            col::OTHER => pre_other.iter().map(|o| o.1.as_str()).collect::<Vec<_>>(),
            col::NOTE => prefills.iter().map(|r| if r.precision.is_quantized() { "Q4's ledger counts the quantized-matmul buffer this stage grew; a process that ran longer prefills before holds more" } else { "" }).collect::<Vec<_>>(),
        )?;
        let mut out = StageOutput::default();
        for (i, r) in decodes.iter().enumerate().filter(|(_, r)| r.batch == 1) {
            out.findings.push(
                Finding::new(format!("{} decode, {}", r.precision, r.variant.name()), "tok/s", dec_tok[i])
                    .ceiling(dec_ceiling[i])
                    .report(
                        (r.precision == Precision::Bf16 && report_model)
                            .then_some(reference::report::BF16_DECODE_TOK_S),
                    )
                    .note(match (dec_torch[i], &dec_other[i]) {
                        (Some(t), (Some(o), label)) => {
                            format!("PyTorch (same GPU, same call) {t:.1} tok/s; {label} {o:.1}")
                        }
                        (Some(t), _) => format!("PyTorch (same GPU, same call) {t:.1} tok/s"),
                        (None, (Some(o), label)) if llama.is_some() => format!("{label} {o:.1} tok/s"),
                        _ => "ceiling: this run's read bandwidth ÷ bytes per step".into(),
                    }),
            );
        }
        for (i, r) in prefills.iter().enumerate() {
            out.findings.push(
                Finding::new(
                    format!("{} prefill of {}, {}", r.precision, r.seq, r.variant.name()),
                    "tok/s",
                    pre_tok[i],
                )
                .note(format!(
                    "peak {:.0} MiB, ledger {:.0} MiB",
                    crate::memory::mib(r.peak),
                    crate::memory::mib(r.ledger_peak)
                )),
            );
        }
        out.table(DECODE_TABLE, decode_df);
        out.table(PREFILL_TABLE, prefill_df);
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}
