//! What each mode should reach: the decode ceiling from this run's bandwidths and the bytes each
//! token moves, on this GPU and on the emulated card.

use super::modes::{managed_split_ceiling, managed_split_placement, ModeRow};
use crate::hw::Card;
use crate::memory::fmt_bytes;
use crate::model::offload::placement::{Bandwidths, Home, PartBytes, Placement, Strategy};
use crate::model::{DecoderConfig, Precision};
use crate::{estimate, reference};

/// What the oversubscription case would give, from this run's measurements.
pub struct Prediction {
    pub case: String,
    pub card: String,
    pub model_bytes: u64,
    pub tok_s: Option<f64>,
    pub article: Option<f64>,
    pub basis: String,
}

/// Predicts `model` on `card` for each unified mode and the lab's best placement. The card's
/// bandwidths are its vendor figures scaled by the efficiency measured here (measured ÷ this
/// GPU's vendor figure); the host is this one.
pub fn predict(
    rows: &[ModeRow],
    bw: &Bandwidths,
    own: Option<&Card>,
    model: &DecoderConfig,
    card: &Card,
    precision: Precision,
) -> Vec<Prediction> {
    let m = estimate::weight_bytes(model, precision);
    let eff = |measured: f64, own_vendor: Option<f64>, card_vendor: Option<f64>| match (own_vendor, card_vendor) {
        (Some(o), Some(c)) => c * (measured / o).min(1.0),
        _ => measured,
    };
    let dev_bw = eff(bw.device, own.and_then(|c| c.bandwidth_gbs), card.bandwidth_gbs);
    let pcie_bw = eff(bw.pcie, own.and_then(|c| c.pcie_gbs), card.pcie_gbs);
    // What the pool can hold beside the context (~0.5 GiB) and a small cache: the resident part.
    let resident = card.total_bytes().saturating_sub(1 << 30).min(m);
    let excess = m - resident;
    let tok = |secs: f64| if secs > 0.0 { Some(1.0 / secs) } else { None };
    let row_of = |mode: &str| rows.iter().find(|r| r.mode == mode && r.outcome.is_ok());
    // Fault-driven migration: the managed mode's first pass moved every weight page to the GPU.
    let fault_bw = row_of("managed").and_then(|r| Some(r.host_bytes? as f64 / r.first_pass_s? / 1e9));
    // Remote reads: the prefer-CPU mode read every weight over PCIe each token.
    let remote_bw = row_of("managed-prefer-cpu").and_then(|r| Some(r.host_bytes? as f64 * r.tok_s? / 1e9));
    let mut out = Vec::new();
    let mut push = |case: &str, tok_s: Option<f64>, article: Option<f64>, basis: String| {
        out.push(Prediction { case: case.into(), card: card.name.clone(), model_bytes: m, tok_s, article, basis })
    };
    use reference::unified_article as a;
    push(
        "managed",
        fault_bw.and_then(|f| tok(2.0 * excess as f64 / (f * 1e9 * pcie_bw / bw.pcie) + resident as f64 / (dev_bw * 1e9))),
        Some(a::MANAGED.1),
        format!(
            "{} resident; each token evicts and faults back the other {} at the fault-driven rate measured here, scaled to the card's PCIe",
            fmt_bytes(resident),
            fmt_bytes(excess)
        ),
    );
    push(
        "managed-prefer-cpu",
        remote_bw.and_then(|r| tok(m as f64 / (r * 1e9 * pcie_bw / bw.pcie))),
        Some(a::PREFER_CPU.1),
        "every weight read over PCIe through the mapping each token, at the remote-read rate measured here, scaled to the card's PCIe".into(),
    );
    push(
        "managed-read-mostly",
        fault_bw.and_then(|f| tok(excess as f64 / (f * 1e9 * pcie_bw / bw.pcie) + resident as f64 / (dev_bw * 1e9))),
        Some(a::READ_MOSTLY.1),
        "as managed, but read-only copies are dropped, not written back: only the faults".into(),
    );
    let parts = PartBytes::new(model, precision.act_dtype().size_in_bytes());
    let card_bw = Bandwidths { device: dev_bw, pcie: pcie_bw, host: bw.host };
    let budget = card.total_bytes().saturating_sub(1 << 30);
    if let Ok(p) = managed_split_placement(&parts, budget, 512 << 20) {
        push(
            "managed-split",
            remote_bw.map(|r| managed_split_ceiling(&p, &parts, dev_bw, r * pcie_bw / bw.pcie)),
            None,
            format!(
                "{} layers in the card's memory; the other {} managed on the host, read over PCIe each token at the remote-read rate measured here, scaled to the card's PCIe",
                p.count(Home::Gpu),
                p.count(Home::Streamed)
            ),
        );
    }
    for strategy in [Strategy::Split, Strategy::Streamed, Strategy::Hybrid] {
        if let Ok(p) = Placement::for_budget(strategy, &parts, budget, 512 << 20, Some(&card_bw)) {
            push(
                &format!("vram-lab {} (ceiling)", strategy.name()),
                Some(p.ceiling_tok_s(&parts, &card_bw)),
                None,
                format!(
                    "{} layers on the GPU, {} on the CPU, {} streamed; this host's {:.0} GB/s",
                    p.count(Home::Gpu),
                    p.count(Home::Cpu),
                    p.count(Home::Streamed),
                    bw.host
                ),
            );
        }
    }
    out
}
