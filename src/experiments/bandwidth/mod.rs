//! Stage 4a, bandwidth: the ceilings the report's "PCIe is the thin straw" is about, measured on
//! this machine — host→device and device→host from pinned and pageable memory, device→device,
//! a kernel that only reads a buffer the size of the model's weights (batch-1 decoding's ceiling),
//! and the CPU reading host memory (what CPU layers of an offload run at). Each beside the vendor
//! figure of the GPU it runs on, and turned into the tok/s it allows for the model.

pub mod tables;

use crate::error::Result;
use crate::memory::bandwidth::{self, Transfer};
use crate::model::{self, Precision};
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use crate::{estimate, hw, limits};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use tables::{col, TABLE};

pub struct Bandwidth;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct BandwidthConfig {
    /// Host↔device copies of this many MiB
    #[arg(long, default_value_t = BandwidthConfig::default().copy_mib, value_parser = limits::count(limits::MAX_MIB as usize))]
    pub copy_mib: usize,
    /// The read kernel's buffer, MiB (0: the model's weights in BF16)
    #[arg(long, default_value_t = BandwidthConfig::default().read_mib, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=limits::MAX_MIB))]
    pub read_mib: usize,
    /// The CPU's read of host memory, MiB
    #[arg(long, default_value_t = BandwidthConfig::default().host_mib, value_parser = limits::count(limits::MAX_MIB as usize))]
    pub host_mib: usize,
    /// Timed repetitions of each transfer (after one warm-up)
    #[arg(long, default_value_t = BandwidthConfig::default().reps, value_parser = limits::count(limits::MAX_REPEATS))]
    pub reps: usize,
}

impl Default for BandwidthConfig {
    fn default() -> Self {
        Self { copy_mib: 1024, read_mib: 0, host_mib: 2048, reps: 10 }
    }
}

fn what(test: &str) -> &'static str {
    match test {
        "host_read" => "CPU reads host memory (all threads)",
        "host_gemv" => "CPU layer kernel: BF16 matrix × vector",
        "h2d_pinned" => "host → device, pinned",
        "h2d_pageable" => "host → device, pageable",
        "d2h_pinned" => "device → host, pinned",
        "d2h_pageable" => "device → host, pageable",
        "d2d" => "device → device (read + write counted)",
        "device_read" => "kernel reading device memory",
        _ => "",
    }
}

impl Stage for Bandwidth {
    const NAME: &'static str = "bandwidth";
    const TITLE: &'static str = "Stage 4a — bandwidth / 带宽天花板";
    const ABOUT: &'static str =
        "PCIe (pinned, pageable), device copy, a read kernel and host-memory reads: the ceilings of every tok/s";
    const INTRO: &'static str = "The report's stage 4 blames PCIe: 38.23 tok/s on the GPU fall to 0.61 with accelerate's CPU offload. Before offloading anything, this stage measures the straws: host→device from pinned and pageable memory, device→host, device→device, a kernel that only reads a buffer the size of the weights (batch-1 decoding reads every weight once per token: this is its ceiling), and the CPU reading host memory. 每个 tok/s 都要和它的物理上限放在一起:带宽 ÷ 每个 token 搬运的字节。";
    type Config = BandwidthConfig;

    fn cpu_config() -> BandwidthConfig {
        BandwidthConfig { copy_mib: 64, read_mib: 64, host_mib: 256, reps: 3 }
    }

    fn run(s: &mut Session, cfg: &BandwidthConfig) -> Result<StageOutput> {
        let opened = model::source::open(&s.source, &s.opts)?;
        let weights = estimate::weight_bytes(&opened.cfg, Precision::Bf16);
        let own = hw::own_card(&s.device);
        let mut rows: Vec<(Transfer, String)> = Vec::new();
        // A host buffer past what the machine has would abort the process (Rust's allocation
        // failure), not return an error: refuse it first.
        if let Some((_, available)) = crate::memory::host::meminfo() {
            if (cfg.host_mib as u64) << 20 > available / 2 {
                return Err(crate::error::LabError::out_of_range(
                    "--host-mib",
                    cfg.host_mib,
                    format!("1 to {} (half the host's available memory)", (available / 2) >> 20),
                ));
            }
        }
        s.console.step("host read");
        rows.push((
            bandwidth::host_read(cfg.host_mib << 20, cfg.reps),
            format!("{} threads", rayon::current_num_threads()),
        ));
        s.console.step("host matrix-vector product");
        // The CPU layers' kernel over 4 × the 7B MLP's gate matrix (543 MB, beyond any L3; a
        // small one on CPU), with its task size and prefetch varied: the profile behind its speed.
        let (r, c) = if s.device.is_cuda() { (4 * 18944, 3584) } else { (4096, 1024) };
        let threads = rayon::current_num_threads();
        for (task_rows, prefetch) in [(64, false), (16, false), (256, false), (64, true)] {
            let tuning = crate::model::host::linear::Tuning { task_rows, prefetch };
            let t = host_gemv(r, c, cfg.reps, tuning)?;
            rows.push((
                t,
                format!(
                    "[{r}, {c}] BF16 × one token, {threads} threads, {task_rows} rows per task{}",
                    if prefetch { ", prefetch" } else { "" }
                ),
            ));
        }
        if s.device.is_cuda() {
            #[cfg(feature = "cuda")]
            {
                s.console.step("PCIe copies");
                for t in bandwidth::pcie(&s.device, cfg.copy_mib << 20, cfg.reps)? {
                    rows.push((t, String::new()));
                }
                s.console.step("device copy");
                rows.push((bandwidth::d2d(&s.device, cfg.copy_mib << 20, cfg.reps)?, String::new()));
                let read = if cfg.read_mib == 0 { weights as usize } else { cfg.read_mib << 20 };
                s.console.step("read kernel");
                rows.push((
                    bandwidth::device_read(&s.device, read, cfg.reps)?,
                    "16-byte streaming loads, 8 blocks of 512 threads per SM".into(),
                ));
            }
        } else {
            s.say("no GPU: only the host read is measured (GPU rows need a CUDA build on a GPU)");
        }
        for (t, _) in &rows {
            s.say(format!("{:<14} {:>9.1} GB/s  ({})", t.test, t.gbs(), what(t.test)));
        }
        let vendor = |test: &str| -> Option<f64> {
            let c = own.as_ref()?;
            match test {
                "h2d_pinned" | "h2d_pageable" | "d2h_pinned" | "d2h_pageable" => c.pcie_gbs,
                "device_read" | "d2d" => c.bandwidth_gbs,
                _ => None,
            }
        };
        let df = df!(
            col::TEST => rows.iter().map(|(t, _)| t.test).collect::<Vec<_>>(),
            col::WHAT => rows.iter().map(|(t, _)| what(t.test)).collect::<Vec<_>>(),
            col::MIB => rows.iter().map(|(t, _)| t.bytes as f64 / crate::memory::MIB).collect::<Vec<_>>(),
            col::MS => rows.iter().map(|(t, _)| t.seconds * 1e3).collect::<Vec<_>>(),
            col::GBS => rows.iter().map(|(t, _)| t.gbs()).collect::<Vec<_>>(),
            col::VENDOR_GBS => rows.iter().map(|(t, _)| vendor(t.test)).collect::<Vec<_>>(),
            col::PCT_VENDOR => rows.iter().map(|(t, _)| vendor(t.test).map(|v| 100.0 * t.gbs() / v)).collect::<Vec<_>>(),
            col::TOK_S_WEIGHTS => rows.iter().map(|(t, _)| estimate::decode_ceiling_tok_s(t.gbs(), weights)).collect::<Vec<_>>(),
            col::NOTE => rows.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(),
        )?;
        let mut out = StageOutput::default();
        out.table(TABLE, df);
        let find = |test: &str| rows.iter().find(|(t, _)| t.test == test).map(|(t, _)| t.gbs());
        for (test, label) in [
            ("device_read", "device read bandwidth"),
            ("h2d_pinned", "host→device, pinned"),
            ("h2d_pageable", "host→device, pageable"),
            ("host_read", "host-memory read by the CPU"),
        ] {
            if let Some(g) = find(test) {
                out.findings.push(Finding::new(label, "GB/s", Some(g)).ceiling(vendor(test)).note(what(test)));
            }
        }
        if let Some(g) = find("device_read") {
            out.findings.push(
                Finding::new(
                    "batch-1 decode ceiling from the read kernel",
                    "tok/s",
                    Some(estimate::decode_ceiling_tok_s(g, weights)),
                )
                .note(format!("{} of BF16 weights read per token", crate::memory::fmt_bytes(weights))),
            );
        }
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}

/// The CPU layers' kernel: a BF16 matrix-vector product over a [rows, cols] matrix in host
/// memory (`HostLinear`), best of `reps`.
pub fn host_gemv(
    rows: usize,
    cols: usize,
    reps: usize,
    tuning: crate::model::host::linear::Tuning,
) -> Result<Transfer> {
    use candle_core::{DType, Device, Tensor};
    let w = Tensor::ones((rows, cols), DType::BF16, &Device::Cpu)?;
    let x = Tensor::ones((1, 1, cols), DType::BF16, &Device::Cpu)?;
    let lin = crate::model::host::linear::HostLinear::new(w, None)?.with_tuning(tuning);
    let seconds = bandwidth::best_of(reps, || lin.forward(&x))?;
    let bytes = (rows * cols * 2) as u64;
    Ok(Transfer { test: "host_gemv", bytes, seconds, counted_bytes: bytes })
}
