//! Where each part of the model lives when it does not all fit on the GPU (the offload stage's
//! device map), chosen from a GPU budget, and what each placement moves per token. Pure: no device.
//!
//! - `Gpu`: resident in device memory;
//! - `Cpu`: computed on the CPU from host memory (llama.cpp's layers past `-ngl`);
//! - `Streamed`: kept in pinned host memory and copied into one of two reusable GPU buffers just
//!   before it runs (double buffering), as accelerate's offload does without the overlap.
//!
//! The embedding table stays in host memory whenever anything is offloaded: a token needs one row
//! of it, so it costs host bandwidth of one row, not a GiB of the budget.

use crate::error::{LabError, Result};
pub use crate::memory::bandwidth::Bandwidths;
use crate::model::config::{DecoderConfig, TensorSpec};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Home {
    Gpu,
    Cpu,
    Streamed,
}

/// How the layers that do not fit are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Everything on the GPU (the reference; no budget)
    Full,
    /// The first layers on the GPU, the rest computed on the CPU (llama.cpp's -ngl)
    Split,
    /// The rest streamed over PCIe into two reusable GPU buffers, overlapped with compute
    Streamed,
    /// The rest shared between streaming and CPU compute in the ratio of the two bandwidths
    Hybrid,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Split => "split",
            Self::Streamed => "streamed",
            Self::Hybrid => "hybrid",
        }
    }
}

/// Where every part of the model lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub strategy: Strategy,
    pub embed: Home,
    pub layers: Vec<Home>,
    /// The final norm and lm_head.
    pub head: Home,
    /// GPU buffers for streamed layers (0 when none is streamed).
    pub slots: usize,
}

/// Bytes of the model's parts in one dense dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartBytes {
    pub embed: u64,
    pub layer: u64,
    pub head: u64,
    pub layers: usize,
    /// One token's hidden state, crossing between the CPU and the GPU.
    pub hidden: u64,
}

impl PartBytes {
    pub fn new(cfg: &DecoderConfig, elem_bytes: usize) -> Self {
        let bytes = |s: &TensorSpec| (s.elem_count() * elem_bytes) as u64;
        let specs = cfg.tensor_specs();
        let sum = |pred: &dyn Fn(&str) -> bool| specs.iter().filter(|s| pred(&s.name)).map(bytes).sum::<u64>();
        let embed = sum(&|n| n == "model.embed_tokens.weight");
        let layer = sum(&|n| n.starts_with("model.layers.0."));
        // A tied head is the embedding table: on the GPU it is a copy of it.
        let head = sum(&|n| n == "model.norm.weight")
            + if cfg.tie_word_embeddings { embed } else { sum(&|n| n == "lm_head.weight") };
        Self { embed, layer, head, layers: cfg.num_hidden_layers, hidden: (cfg.hidden_size * elem_bytes) as u64 }
    }

    pub fn total(&self) -> u64 {
        self.embed + self.layer * self.layers as u64 + self.head
    }
}

/// Bytes one decoded token reads or moves, by where.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TokenTraffic {
    /// Read from device memory by GPU kernels (resident and streamed layers, the head).
    pub device: u64,
    /// Copied host → device (streamed layers' weights, hidden states).
    pub pcie: u64,
    /// Read from host memory by the CPU (CPU layers, the embedding row).
    pub host: u64,
}

impl Placement {
    pub fn full(layers: usize) -> Self {
        Self { strategy: Strategy::Full, embed: Home::Gpu, layers: vec![Home::Gpu; layers], head: Home::Gpu, slots: 0 }
    }

    /// The placement of `strategy` whose GPU part fits `budget` bytes, `reserve` of them kept for
    /// the KV cache, activations and workspace. The head stays on the GPU; as many layers as fit
    /// are resident (the first ones); streaming keeps two layer buffers. Hybrid streams a share
    /// of the rest in proportion to the PCIe and host bandwidths, spread evenly among them.
    pub fn for_budget(
        strategy: Strategy,
        parts: &PartBytes,
        budget: u64,
        reserve: u64,
        bw: Option<&Bandwidths>,
    ) -> Result<Self> {
        let n = parts.layers;
        if strategy == Strategy::Full {
            return Ok(Self::full(n));
        }
        let fixed = parts.head + reserve;
        let room = budget.checked_sub(fixed).ok_or_else(|| {
            LabError::input(format!(
                "a GPU budget of {} cannot hold the output layer ({}) and the reserve ({}); give at least {}",
                crate::memory::fmt_bytes(budget),
                crate::memory::fmt_bytes(parts.head),
                crate::memory::fmt_bytes(reserve),
                crate::memory::fmt_bytes(fixed + parts.layer)
            ))
        })?;
        let streams = matches!(strategy, Strategy::Streamed | Strategy::Hybrid);
        // The most resident layers that fit beside their stream buffers: two (double
        // buffering) when two layers or more are streamed, one when only one fits at all.
        let fits = |g: usize, slots: usize| (g + slots) as u64 * parts.layer <= room;
        let slots_for = |g: usize| if streams && g < n { 2.min(n - g) } else { 0 };
        let (gpu, slots) = match (0..=n).rev().find(|&g| fits(g, slots_for(g))) {
            Some(g) => (g, slots_for(g)),
            None if streams && fits(0, 1) => (0, 1),
            None => {
                return Err(LabError::input(format!(
                    "a GPU budget of {} cannot hold a layer buffer ({}) beside the output layer and the reserve",
                    crate::memory::fmt_bytes(budget),
                    crate::memory::fmt_bytes(parts.layer)
                )))
            }
        };
        let gpu = gpu.min(n);
        let rest = n - gpu;
        let streamed = match strategy {
            Strategy::Streamed => rest,
            Strategy::Hybrid => {
                let bw = bw.ok_or_else(|| {
                    LabError::input("the hybrid placement needs the measured PCIe and host bandwidths")
                })?;
                hybrid_streamed(rest, bw)
            }
            _ => 0,
        };
        let mut layers = vec![Home::Gpu; gpu];
        layers.extend(spread(rest, streamed));
        let slots = if streamed == 0 { 0 } else { slots.min(streamed) };
        Ok(Self { strategy, embed: Home::Cpu, layers, head: Home::Gpu, slots })
    }

    /// The home of the tensor called `name` (HF naming).
    pub fn home_of(&self, name: &str) -> Home {
        if name.starts_with("model.embed_tokens.") {
            return self.embed;
        }
        let layer =
            name.strip_prefix("model.layers.").and_then(|r| r.split('.').next()).and_then(|l| l.parse::<usize>().ok());
        match layer {
            Some(l) => self.layers.get(l).copied().unwrap_or(Home::Gpu),
            None => self.head,
        }
    }

    /// The device the tensor `name` is loaded to: `gpu` for GPU parts, the CPU for the rest
    /// (streamed layers are pinned from there).
    pub fn device_of(&self, name: &str, gpu: &candle_core::Device) -> candle_core::Device {
        match self.home_of(name) {
            Home::Gpu => gpu.clone(),
            _ => candle_core::Device::Cpu,
        }
    }

    pub fn count(&self, home: Home) -> usize {
        self.layers.iter().filter(|h| **h == home).count()
    }

    /// Model bytes held in device memory (resident parts and stream buffers).
    pub fn gpu_bytes(&self, parts: &PartBytes) -> u64 {
        let on = |h: Home, b: u64| if h == Home::Gpu { b } else { 0 };
        on(self.embed, parts.embed)
            + on(self.head, parts.head)
            + (self.count(Home::Gpu) + self.slots) as u64 * parts.layer
    }

    /// Model bytes held in host memory (pinned for streamed layers).
    pub fn host_bytes(&self, parts: &PartBytes) -> u64 {
        let off = |h: Home, b: u64| if h == Home::Gpu { 0 } else { b };
        off(self.embed, parts.embed)
            + off(self.head, parts.head)
            + (self.layers.len() - self.count(Home::Gpu)) as u64 * parts.layer
    }

    /// What one decoded token reads and moves: every weight byte once where it lives, streamed
    /// weights once more over PCIe, and the hidden state at every CPU↔GPU crossing.
    pub fn traffic(&self, parts: &PartBytes) -> TokenTraffic {
        let mut t = TokenTraffic::default();
        match self.embed {
            Home::Gpu => t.device += parts.hidden,
            _ => t.host += parts.hidden,
        }
        let mut on_cpu = self.embed != Home::Gpu;
        let parts_in_order = self.layers.iter().map(|h| (*h, parts.layer)).chain([(self.head, parts.head)]);
        for (home, bytes) in parts_in_order {
            let cpu_here = home == Home::Cpu;
            if cpu_here != on_cpu {
                t.pcie += parts.hidden;
                on_cpu = cpu_here;
            }
            match home {
                Home::Gpu => t.device += bytes,
                Home::Cpu => t.host += bytes,
                Home::Streamed => {
                    t.pcie += bytes;
                    t.device += bytes;
                }
            }
        }
        t
    }

    /// The fastest a token can be with these bandwidths: copies overlap everything, while GPU
    /// and CPU layers run one after the other (each needs the previous one's output).
    pub fn ceiling_tok_s(&self, parts: &PartBytes, bw: &Bandwidths) -> f64 {
        let t = self.traffic(parts);
        let compute = t.device as f64 / (bw.device * 1e9) + t.host as f64 / (bw.host * 1e9);
        let copy = t.pcie as f64 / (bw.pcie * 1e9);
        1.0 / compute.max(copy)
    }
}

impl Placement {
    /// The term that sets `ceiling_tok_s`, beside the three terms per token: GPU and host reads
    /// (one after the other) against the copies (which overlap them).
    pub fn bound(&self, parts: &PartBytes, bw: &Bandwidths) -> String {
        let t = self.traffic(parts);
        let ms = |bytes: u64, gbs: f64| bytes as f64 / (gbs * 1e9) * 1e3;
        let (dev, host, copy) = (ms(t.device, bw.device), ms(t.host, bw.host), ms(t.pcie, bw.pcie));
        let what = if copy > dev + host {
            "PCIe copies"
        } else if host > dev {
            "host reads (CPU layers)"
        } else {
            "GPU reads"
        };
        format!("{what}: GPU reads {dev:.1} ms + host reads {host:.1} ms, copies {copy:.1} ms alongside")
    }
}

/// Layers of `rest` offloaded ones to stream so that copying them takes as long as computing the
/// others on the CPU: s / pcie = (rest − s) / host.
fn hybrid_streamed(rest: usize, bw: &Bandwidths) -> usize {
    let share = bw.pcie / (bw.pcie + bw.host);
    ((rest as f64 * share).round() as usize).min(rest)
}

/// `rest` homes, `streamed` of them Streamed and spread evenly among the Cpu ones, so each copy
/// overlaps the CPU layers before it.
fn spread(rest: usize, streamed: usize) -> Vec<Home> {
    (0..rest)
        .map(|i| {
            // Bresenham: layer i is streamed when the running share crosses an integer.
            let before = i * streamed / rest.max(1);
            let after = (i + 1) * streamed / rest.max(1);
            if after > before {
                Home::Streamed
            } else {
                Home::Cpu
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn seven_b() -> PartBytes {
        PartBytes::new(&DecoderConfig::preset("qwen2.5-7b").unwrap(), 2)
    }

    #[test]
    fn seven_b_parts_add_up_to_the_weights() {
        let p = seven_b();
        // 7,615,616,512 parameters × 2 B; one layer: 233,057,792 parameters.
        assert_eq!(p.total(), 7_615_616_512 * 2);
        assert_eq!(p.layer, 233_057_792 * 2);
        assert_eq!(p.embed, 152_064 * 3584 * 2);
        assert_eq!(p.head, 152_064 * 3584 * 2 + 3584 * 2);
    }

    #[test]
    fn split_fills_the_budget_with_layers() {
        let p = seven_b();
        let pl = Placement::for_budget(Strategy::Split, &p, 5 * GIB, 256 << 20, None).unwrap();
        // (5 GiB − 1,090,046,976 − 256 MiB) / 466,115,584 = 8.6 → 8 layers.
        assert_eq!(pl.count(Home::Gpu), 8);
        assert_eq!(pl.count(Home::Cpu), 20);
        assert_eq!(pl.slots, 0);
        assert!(pl.gpu_bytes(&p) + (256 << 20) <= 5 * GIB);
        let t = pl.traffic(&p);
        assert_eq!(t.host, 20 * p.layer + p.hidden);
        // The hidden state goes up once (embedding row) and at the GPU→CPU and CPU→GPU crossings.
        assert_eq!(t.pcie, 3 * p.hidden);
    }

    #[test]
    fn streaming_keeps_two_buffers() {
        let p = seven_b();
        let pl = Placement::for_budget(Strategy::Streamed, &p, 5 * GIB, 256 << 20, None).unwrap();
        assert_eq!(pl.count(Home::Gpu), 6);
        assert_eq!(pl.count(Home::Streamed), 22);
        assert_eq!(pl.slots, 2);
        assert_eq!(pl.gpu_bytes(&p), p.head + 8 * p.layer);
        let t = pl.traffic(&p);
        assert_eq!(t.pcie, 22 * p.layer + p.hidden);
        assert_eq!(t.device, 28 * p.layer + p.head);
        let bw = Bandwidths { device: 4000.0, pcie: 50.0, host: 100.0 };
        let expect = 50e9 / t.pcie as f64;
        assert!((pl.ceiling_tok_s(&p, &bw) - expect).abs() < 1e-9);
    }

    #[test]
    fn hybrid_splits_the_rest_by_bandwidth() {
        let p = seven_b();
        let bw = Bandwidths { device: 4000.0, pcie: 50.0, host: 100.0 };
        let pl = Placement::for_budget(Strategy::Hybrid, &p, 5 * GIB, 256 << 20, Some(&bw)).unwrap();
        assert_eq!(pl.count(Home::Gpu), 6);
        // 22 offloaded, a third streamed.
        assert_eq!(pl.count(Home::Streamed), 7);
        assert_eq!(pl.count(Home::Cpu), 15);
        // Spread: never two streamed layers next to each other.
        assert!(pl.layers.windows(2).all(|w| !(w[0] == Home::Streamed && w[1] == Home::Streamed)));
        assert!(
            pl.ceiling_tok_s(&p, &bw)
                > Placement::for_budget(Strategy::Split, &p, 5 * GIB, 256 << 20, None).unwrap().ceiling_tok_s(&p, &bw)
        );
        // 15 CPU layers at 100 GB/s (about 70 ms) outlast 7 streamed ones at 50 GB/s (65 ms); all
        // 22 streamed, the copies bound.
        assert!(pl.bound(&p, &bw).starts_with("host reads"), "{}", pl.bound(&p, &bw));
        let streamed = Placement::for_budget(Strategy::Streamed, &p, 5 * GIB, 256 << 20, None).unwrap();
        assert!(streamed.bound(&p, &bw).starts_with("PCIe copies"), "{}", streamed.bound(&p, &bw));
        assert!(Placement::full(28).bound(&p, &bw).starts_with("GPU reads"));
    }

    #[test]
    fn a_budget_below_the_head_is_refused() {
        let p = seven_b();
        let e = Placement::for_budget(Strategy::Split, &p, GIB, 256 << 20, None).unwrap_err().to_string();
        assert!(e.contains("give at least"), "{e}");
        assert!(Placement::for_budget(Strategy::Hybrid, &p, 5 * GIB, 0, None).is_err());
    }

    #[test]
    fn a_large_budget_keeps_everything_resident() {
        let p = seven_b();
        let pl = Placement::for_budget(Strategy::Streamed, &p, 100 * GIB, 0, None).unwrap();
        assert_eq!(pl.count(Home::Gpu), 28);
        assert_eq!(pl.slots, 0);
        assert_eq!(pl.traffic(&p).pcie, p.hidden);
    }
}
