//! The estimator beside every measurement stages 1–2 committed: for each run folder under
//! `--results`, the weights after loading (anatomy.csv), what each prefill and batch step left
//! allocated and its peak (kv_prefill.csv, kv_batch.csv), and the longest context the bisection
//! found (kv_limit.csv), each with the formula's figure and the error. Reads CSVs only: it runs
//! anywhere, and `tests/estimate_check.rs` holds it to 3 %.

pub mod checks;
pub mod llamacpp;
pub mod runs;
pub mod summary;
pub mod tables;
pub mod transformers;

use crate::error::Result;
use crate::model::Logits;
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use checks::{limits_of, steps_of, LimitCheck, StepCheck};
use polars::prelude::*;
use runs::kv_folders;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tables::{LIMITS, LLAMACPP, LLAMACPP_DEVICES, PREFILL, SUMMARY, TRANSFORMERS};

pub use checks::{limits, steps, weights};

pub struct Check;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct CheckConfig {
    /// The folder of committed runs to check (searched recursively)
    #[arg(long, default_value = "data/results")]
    pub results: PathBuf,
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self { results: PathBuf::from(crate::record::DIR) }
    }
}

impl Stage for Check {
    const NAME: &'static str = "check";
    const TITLE: &'static str = "Estimator check — 估算 vs 实测: every committed measurement of stages 1–2";
    const ABOUT: &'static str = "The estimator beside every committed GPU measurement of stages 1–2 (weights, allocated, peak, transient, the bisected longest context), with the error";
    const INTRO: &'static str = "估算器的每个公式逐项对照 data/results 下已提交的 GPU 实测:加载后的权重、一次预填充留下的已分配显存(KV cache、logits,Q4 还有 candle 量化矩阵乘的常驻缓冲)、它的峰值(逐个张量计算的瞬时部分),以及二分法找到的最长上下文,并给出误差。先看汇总,逐行明细折叠在下面。<br>Each formula of the estimator against what the GPU runs committed under data/results measured: weights after loading, what a prefill leaves allocated (KV cache, logits and, for Q4, candle's quantized-matmul buffer), its peak (the transient counted tensor by tensor), and the longest context the bisection found. The summary comes first; the rows, file by file, are folded below it.";
    type Config = CheckConfig;

    fn run(s: &mut Session, c: &CheckConfig) -> Result<StageOutput> {
        if !c.results.is_dir() {
            // `vram-lab run` from outside the repository: nothing to check, said, not an error.
            s.say(format!(
                "no results folder {}: nothing to check (run from the repository root, or give --results)",
                c.results.display()
            ));
            return Ok(StageOutput::default());
        }
        let folders = kv_folders(&c.results)?;
        let (st, lim) = (steps_of(&folders), limits_of(&folders));
        let wt = weights(&c.results)?;
        let mut out = StageOutput::default();
        let worst = |v: Vec<f64>| v.into_iter().fold(0.0f64, |m, e| m.max(e.abs()));
        let worst_alloc = worst(
            st.iter().map(|x| x.allocated_err_pct()).chain(wt.iter().map(|w| 100.0 * (w.3 - w.2) / w.2)).collect(),
        );
        let worst_peak = worst(st.iter().map(|x| x.peak_err_pct()).collect());
        s.say(format!(
            "{} steps and {} loads: allocated within {worst_alloc:.2} %, peak within {worst_peak:.2} %",
            st.len(),
            wt.len()
        ));
        out.findings.push(
            Finding::new("allocated: the worst error of the estimate", "%", Some(worst_alloc)).note(format!(
                "{} prefill/batch steps and {} loads committed",
                st.len(),
                wt.len()
            )),
        );
        out.findings.push(Finding::new("peak: the worst error of the estimate", "%", Some(worst_peak)));
        for retried in [true, false] {
            let Some(l) = lim
                .iter()
                .filter(|l| l.retried == retried)
                .max_by(|a, b| a.err_pct().abs().total_cmp(&b.err_pct().abs()))
            else {
                continue;
            };
            let what = if retried {
                "longest context, OOM retried after a trim: the worst error"
            } else {
                "longest context, runs before the retry: the worst error"
            };
            let why = if retried {
                "the ledger counts the pool's 32 MiB chunks: a measured slack per chunk of live allocations"
            } else {
                "the pool's mapped memory, not the live bytes, hit the card"
            };
            let step = 100.0 * l.resolution as f64 / l.max_context as f64;
            out.findings.push(Finding::new(what, "%", Some(l.err_pct())).note(format!(
                "{} {} {} on {}: measured {}, the ledger's search {} (one bisection step is {step:.1} % there); {why}",
                l.precision,
                l.logits.name(),
                l.attention,
                l.card,
                l.max_context,
                l.predicted_max_context
            )));
        }
        // How many land within 2 %: the bar for the runs with the retry.
        let retried: Vec<&LimitCheck> = lim.iter().filter(|l| l.retried).collect();
        if !retried.is_empty() {
            let within = retried.iter().filter(|l| l.err_pct().abs() <= 2.0).count();
            let within_step = retried
                .iter()
                .filter(|l| {
                    l.err_pct().abs() > 2.0
                        && l.err_pct().abs() <= 100.0 * l.resolution as f64 / l.max_context as f64 + 1e-9
                })
                .count();
            s.say(format!(
                "longest context with the OOM retry: {within} of {} bisections within 2 % of the ledger's search, {within_step} more within one bisection step",
                retried.len()
            ));
            out.findings.push(
                Finding::new(
                    "longest context, OOM retried: bisections within 2 % of the ledger's search",
                    "count",
                    Some(within as f64),
                )
                .note(format!("of {}; {within_step} more within one bisection step", retried.len())),
            );
        }
        out.table(SUMMARY, summary::table(&wt, &st, &lim)?);
        let launches = llamacpp::launches(&c.results)?;
        if !launches.is_empty() {
            llamacpp_findings(s, &mut out, &launches);
            out.table(LLAMACPP, llamacpp_table(&launches)?);
            if launches.iter().any(|x| !x.devices.is_empty()) {
                out.table(LLAMACPP_DEVICES, llamacpp_devices_table(&launches)?);
            }
        }
        let sweeps = transformers::sweeps(&c.results)?;
        if !sweeps.is_empty() {
            out.findings.extend(transformers::findings(&sweeps));
            out.table(TRANSFORMERS, transformers::table(&sweeps)?);
        }
        // The loads as rows of the same table: seq 0, allocated = the weights.
        let mut rows: Vec<StepCheck> = wt
            .iter()
            .map(|(file, p, measured, predicted)| StepCheck {
                file: file.clone(),
                precision: *p,
                logits: Logits::Last,
                attention: "load".into(),
                seq: 0,
                batch: 0,
                allocated_mib: *measured,
                predicted_allocated_mib: *predicted,
                peak_mib: *measured,
                predicted_peak_mib: *predicted,
                transient_mib: 0.0,
                predicted_transient_mib: 0.0,
                peak_at: "load",
            })
            .collect();
        rows.extend(st);
        use tables::col::*;
        out.table(
            PREFILL,
            df!(
                FILE => rows.iter().map(|r| r.file.clone()).collect::<Vec<_>>(),
                PRECISION => rows.iter().map(|r| r.precision.to_string()).collect::<Vec<_>>(),
                LOGITS => rows.iter().map(|r| r.logits.name()).collect::<Vec<_>>(),
                ATTENTION => rows.iter().map(|r| r.attention.clone()).collect::<Vec<_>>(),
                SEQ => rows.iter().map(|r| r.seq as u64).collect::<Vec<_>>(),
                BATCH => rows.iter().map(|r| r.batch as u64).collect::<Vec<_>>(),
                ALLOCATED_MIB => rows.iter().map(|r| r.allocated_mib).collect::<Vec<_>>(),
                PREDICTED_ALLOCATED_MIB => rows.iter().map(|r| r.predicted_allocated_mib).collect::<Vec<_>>(),
                ALLOCATED_ERR_PCT => rows.iter().map(|r| r.allocated_err_pct()).collect::<Vec<_>>(),
                PEAK_MIB => rows.iter().map(|r| r.peak_mib).collect::<Vec<_>>(),
                PREDICTED_PEAK_MIB => rows.iter().map(|r| r.predicted_peak_mib).collect::<Vec<_>>(),
                PEAK_ERR_PCT => rows.iter().map(|r| r.peak_err_pct()).collect::<Vec<_>>(),
                TRANSIENT_MIB => rows.iter().map(|r| r.transient_mib).collect::<Vec<_>>(),
                PREDICTED_TRANSIENT_MIB => rows.iter().map(|r| r.predicted_transient_mib).collect::<Vec<_>>(),
                PEAK_AT => rows.iter().map(|r| r.peak_at).collect::<Vec<_>>(),
            )?,
        );
        out.table(
            LIMITS,
            df!(
                FILE => lim.iter().map(|r| r.file.clone()).collect::<Vec<_>>(),
                CARD => lim.iter().map(|r| r.card.clone()).collect::<Vec<_>>(),
                PRECISION => lim.iter().map(|r| r.precision.to_string()).collect::<Vec<_>>(),
                LOGITS => lim.iter().map(|r| r.logits.name()).collect::<Vec<_>>(),
                ATTENTION => lim.iter().map(|r| r.attention.clone()).collect::<Vec<_>>(),
                BATCH => lim.iter().map(|r| r.batch as u64).collect::<Vec<_>>(),
                MAX_CONTEXT => lim.iter().map(|r| r.max_context as u64).collect::<Vec<_>>(),
                PREDICTED_MAX_CONTEXT => lim.iter().map(|r| r.predicted_max_context as u64).collect::<Vec<_>>(),
                CONTEXT_ERR_PCT => lim.iter().map(|r| r.err_pct()).collect::<Vec<_>>(),
                OOM_RETRY => lim.iter().map(|r| r.retried).collect::<Vec<_>>(),
            )?,
        );
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }

    fn model(_cfg: &CheckConfig, _run_model: &str) -> Option<String> {
        None
    }
}

/// The error matrix's headline: the median and worst error of llama.cpp's buffers, and how many
/// launches land within the bar, max(1 %, 64 MiB).
fn llamacpp_findings(s: &mut Session, out: &mut StageOutput, l: &[llamacpp::LaunchCheck]) {
    let Some(worst) = l.iter().max_by(|a, b| a.err_mib().abs().total_cmp(&b.err_mib().abs())) else { return };
    let mut abs: Vec<f64> = l.iter().map(|x| x.err_pct().abs()).collect();
    abs.sort_by(f64::total_cmp);
    let median = abs[abs.len() / 2];
    let within = l.iter().filter(|x| x.err_mib().abs() <= (0.01 * x.measured_total()).max(64.0)).count();
    s.say(format!(
        "llama.cpp: {} launches, median |error| {median:.2} %, {within} within max(1 %, 64 MiB); worst {:+.1} MiB ({})",
        l.len(),
        worst.err_mib(),
        worst.file
    ));
    out.findings.push(
        Finding::new("llama.cpp's GPU buffers: the median |error| of the estimate", "%", Some(median))
            .note(format!("{} launches; {within} within max(1 %, 64 MiB)", l.len())),
    );
    out.findings.push(
        Finding::new("llama.cpp's GPU buffers: the worst error", "MiB", Some(worst.err_mib())).note(worst.file.clone()),
    );
    // The whole process as nvidia-smi lists it: buffers, context, cuBLAS and the scratch pool.
    if let Some(w) = l.iter().max_by(|a, b| a.smi_err_mib().abs().total_cmp(&b.smi_err_mib().abs())) {
        let within = l.iter().filter(|x| x.smi_err_mib().abs() <= (0.01 * x.smi_mib).max(64.0)).count();
        out.findings.push(
            Finding::new("llama.cpp's whole process (nvidia-smi): the worst error", "MiB", Some(w.smi_err_mib()))
                .note(format!("{}; {within} of {} within max(1 %, 64 MiB)", w.file, l.len())),
        );
    }
}

/// One row per GPU of each launch over several.
fn llamacpp_devices_table(l: &[llamacpp::LaunchCheck]) -> Result<DataFrame> {
    use tables::col::*;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let rows: Vec<(String, String, &llamacpp::DeviceCheck, f64)> = l
        .iter()
        .flat_map(|x| {
            let beyond = mib(x.beyond.total());
            x.devices.iter().enumerate().map(move |(d, g)| (x.file.clone(), format!("cuda{d}"), g, beyond))
        })
        .collect();
    let f = |g: &dyn Fn(&llamacpp::DeviceCheck) -> f64| rows.iter().map(|r| g(r.2)).collect::<Vec<f64>>();
    Ok(df!(
        FILE => rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        DEVICE => rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        MODEL_MIB => f(&|g| g.measured[0]),
        PREDICTED_MODEL_MIB => f(&|g| mib(g.predicted.model)),
        KV_MIB => f(&|g| g.measured[1]),
        PREDICTED_KV_MIB => f(&|g| mib(g.predicted.context)),
        COMPUTE_MIB => f(&|g| g.measured[2]),
        PREDICTED_COMPUTE_MIB => f(&|g| mib(g.predicted.compute)),
        NVIDIA_SMI_MIB => f(&|g| g.smi_mib),
        PREDICTED_NVIDIA_SMI_MIB => rows.iter().map(|r| mib(r.2.predicted.total()) + r.3).collect::<Vec<f64>>(),
    )?)
}

fn llamacpp_table(l: &[llamacpp::LaunchCheck]) -> Result<DataFrame> {
    use tables::col::*;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let f = |g: &dyn Fn(&llamacpp::LaunchCheck) -> f64| l.iter().map(g).collect::<Vec<f64>>();
    Ok(df!(
        FILE => l.iter().map(|x| x.file.clone()).collect::<Vec<_>>(),
        PRESET => l.iter().map(|x| x.preset.clone()).collect::<Vec<_>>(),
        TYPE => l.iter().map(|x| x.ftype.name().to_string()).collect::<Vec<_>>(),
        FLAGS => l.iter().map(|x| x.launch.flags()).collect::<Vec<_>>(),
        MODEL_MIB => f(&|x| x.measured[0]),
        PREDICTED_MODEL_MIB => f(&|x| mib(x.predicted.model)),
        KV_MIB => f(&|x| x.measured[1]),
        PREDICTED_KV_MIB => f(&|x| mib(x.predicted.context)),
        COMPUTE_MIB => f(&|x| x.measured[2]),
        PREDICTED_COMPUTE_MIB => f(&|x| mib(x.predicted.compute)),
        SELF_MIB => f(&|x| x.measured_total()),
        PREDICTED_SELF_MIB => f(&|x| x.predicted_total()),
        ERR_MIB => f(&|x| x.err_mib()),
        ERR_PCT => f(&|x| x.err_pct()),
        NVIDIA_SMI_MIB => f(&|x| x.smi_mib),
        OUTSIDE_MIB => f(&|x| x.outside_mib()),
        PREDICTED_NVIDIA_SMI_MIB => f(&|x| x.predicted_smi_mib()),
        NVIDIA_SMI_ERR_MIB => f(&|x| x.smi_err_mib()),
    )?)
}
