//! The KV stage's sweeps replayed on the ledger: which prefills a process ran before a given one
//! matters for Q4 (candle's quantized matmul keeps the buffer of the longest, `workspace`), and
//! the longest context a bisection finds is the ledger's edge on the bisection's own grid.

use super::bytes::{kv_bytes_per_token, weight_bytes};
use super::fit::{ledger_after, Inference};
use super::transient;
use super::workspace;
use crate::model::DecoderConfig;
use crate::search::bisect;

/// Whether a prefill that did not fit still grew the quantized buffer: its first layer got
/// through attention into the MLP's down projection, where the new buffer is allocated beside
/// the old. A prefill that fitted did.
pub fn reaches_growth(cfg: &DecoderConfig, w: &Inference, runtime: u64, seen: u64, capacity: u64) -> bool {
    let act = w.precision.act_dtype().size_in_bytes();
    let p = transient::phases(cfg, &w.prefill());
    let tokens = (w.seq * w.batch) as u64;
    let held = workspace::held(cfg, w.precision, seen);
    let base = weight_bytes(cfg, w.precision) + held + kv_bytes_per_token(cfg, act) * tokens + runtime;
    let growth = p.down_proj + workspace::at_growth(cfg, w.precision, seen, tokens) - held;
    // Each moment with the pool's slack, as `ledger_after` counts it: the old buffers beside
    // every moment, the new, old and fixup buffers in the growing down projection.
    let kept = transient::chunk_share(workspace::held_parts(cfg, w.precision, seen));
    let growing = transient::chunk_share(workspace::at_growth_parts(cfg, w.precision, seen, tokens));
    let slack = |chunked: u64| transient::pool_slack(chunked, w.allocator.slack());
    // Attention, o projection and MLP of the first layer: not the logits.
    let before_logits = p.moments()[..3].iter().map(|&(bytes, n)| bytes + slack(n + kept)).max().unwrap_or(0);
    let busiest = before_logits.max(growth + slack(p.chunked.down_proj + growing));
    base + busiest <= capacity
}

/// The tokens the quantized buffer was sized for before each of `attempts` (in the order the
/// process ran them, each with whether it fitted), starting from `seen`. Only quantized
/// prefills grow it.
pub fn seen_before(
    cfg: &DecoderConfig,
    runtime: u64,
    capacity: u64,
    attempts: &[(Inference, bool)],
    mut seen: u64,
) -> Vec<u64> {
    let mut out = Vec::with_capacity(attempts.len());
    for (w, ok) in attempts {
        out.push(seen);
        if w.precision.is_quantized() && (*ok || reaches_growth(cfg, w, runtime, seen, capacity)) {
            seen = seen.max((w.seq * w.batch) as u64);
        }
    }
    out
}

/// The KV stage's search on the ledger: `doubling` lengths until the first that does not fit
/// (doubling on past the last given), then the bisection to `resolution`, the quantized buffer
/// carried from attempt to attempt. Returns the longest context found and the buffer's tokens.
pub fn longest_context(
    cfg: &DecoderConfig,
    w: &Inference,
    runtime: u64,
    capacity: u64,
    doubling: &[usize],
    resolution: usize,
    mut seen: u64,
) -> (usize, u64) {
    let attempt = |seq: usize, seen: &mut u64| {
        let t = Inference { seq, ..*w };
        let fits = ledger_after(cfg, &t, runtime, *seen).device() <= capacity;
        if t.precision.is_quantized() && (fits || reaches_growth(cfg, &t, runtime, *seen, capacity)) {
            *seen = (*seen).max((seq * w.batch) as u64);
        }
        fits
    };
    let mut ok = 0;
    let mut lengths = doubling.to_vec();
    let mut i = 0;
    let oom = loop {
        let seq = match lengths.get(i) {
            Some(&s) => s,
            None => {
                let next = lengths.last().copied().unwrap_or(1).max(1) * 2;
                if next > 1 << 22 {
                    return (ok, seen);
                }
                lengths.push(next);
                next
            }
        };
        if !attempt(seq, &mut seen) {
            break seq;
        }
        ok = seq;
        i += 1;
    };
    let (found, _) = bisect(ok as u64, oom as u64, resolution as u64, |n| Ok(attempt(n as usize, &mut seen)))
        .unwrap_or((ok as u64, vec![]));
    (found as usize, seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::layers::attention::AttentionMode;
    use crate::model::{Logits, Precision};

    fn w(precision: Precision, logits: Logits) -> Inference {
        Inference {
            precision,
            seq: 1,
            batch: 1,
            logits,
            attention: AttentionMode::default(),
            stored: None,
            allocator: Default::default(),
        }
    }

    /// The search lands on the ledger's edge, on its grid: the length found fits, one step of the
    /// grid more does not.
    #[test]
    fn search_finds_the_ledger_edge_on_the_grid() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let cap = 24u64 << 30;
        let doubling: Vec<usize> = (10..=15).map(|p| 1 << p).collect();
        for p in [Precision::Bf16, Precision::Q4] {
            let w = w(p, Logits::Last);
            let (n, seen) = longest_context(&cfg, &w, 700 << 20, cap, &doubling, 256, 0);
            assert!(n % 256 == 0 && n > 1024, "{p}: {n}");
            let at = |seq| ledger_after(&cfg, &Inference { seq, ..w }, 700 << 20, seen).device();
            assert!(at(n) <= cap && at(n + 256) > cap, "{p}: {n}");
        }
    }

    /// A Q4 process that tried a longer prefill and failed in its logits still carries that
    /// prefill's buffer; one that failed in its first layer's attention does not.
    #[test]
    fn failed_prefills_grow_the_buffer_only_past_the_first_mlp() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let cap = 24u64 << 30;
        let all = |seq| Inference { seq, ..w(Precision::Q4, Logits::All) };
        let naive = |seq| Inference { seq, attention: AttentionMode::Naive, ..w(Precision::Q4, Logits::All) };
        assert_eq!(
            seen_before(&cfg, 0, cap, &[(all(1024), true), (all(32768), false), (all(2048), true)], 0),
            vec![0, 1024, 32768]
        );
        assert_eq!(
            seen_before(&cfg, 0, cap, &[(naive(1024), true), (naive(32768), false), (naive(2048), true)], 0),
            vec![0, 1024, 1024]
        );
    }
}
