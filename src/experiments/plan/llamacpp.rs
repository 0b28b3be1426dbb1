//! `plan --engine llama.cpp`: the `llama-server` flags that fit a card, with a margin left free:
//! every layer on the GPU at the longest context that fits, or, when the model does not fit
//! whole, at the context wanted: for a mixture the fewest layers whose experts stay in host memory
//! (`--n-cpu-moe`, what users of a 24 GB card run Qwen3-30B-A3B with), else the most layers. The need is the whole process as nvidia-smi
//! lists it after a prompt filling the context (`estimate::llamacpp` and its `process`). Over
//! several cards (`plan_cards`): every layer on them, the `-ts` that reaches the longest context.

use crate::error::Result;
use crate::estimate::llamacpp::{self, process, CacheType, Launch};
use crate::experiments::estimate::engine::priced;
use crate::experiments::estimate::tables::{col, PLAN_LLAMACPP, PLAN_LLAMACPP_CARDS};
use crate::hw::Card;
use crate::memory::mib;
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::writer::Planned;
use crate::model::gguf::Gguf;
use crate::model::DecoderConfig;
use crate::session::Session;
use crate::stage::{Finding, StageOutput};
use polars::prelude::*;

/// llama.cpp rounds a context up to this many cells; the plan steps by it.
const CELLS: usize = 256;

fn cache_name(t: CacheType) -> String {
    t.ggml().name.to_ascii_lowercase()
}

/// The process's need for launch `l`: llama.cpp's GPU buffers and what lies beyond them.
fn need(cfg: &DecoderConfig, tensors: &[Planned], l: &Launch) -> Result<u64> {
    Ok(needs(cfg, tensors, l)?.iter().sum())
}

/// Each GPU's need for launch `l` over several GPUs: its buffers and a CUDA context, cuBLAS and
/// a scratch pool of its own (the one-GPU figures).
fn needs(cfg: &DecoderConfig, tensors: &[Planned], l: &Launch) -> Result<Vec<u64>> {
    let beyond = process::beyond(cfg, l, llamacpp::mmq_weights(tensors), l.ctx as u64).total();
    Ok(llamacpp::memory(cfg, tensors, l)?.gpus.iter().map(|b| b.total() + beyond).collect())
}

/// The `-ts` that gives the longest context over cards of `budgets` bytes, every layer on the
/// GPUs (`cache` for K and V): `fixed` when given, else from each card's budget as the share,
/// three rounds of moving layers toward the cards with room left (each share times its card's
/// budget over its need at the longest context so far), the best kept. Returns the launch and
/// each card's need.
fn split_for(
    cfg: &DecoderConfig,
    tensors: &[Planned],
    budgets: &[u64],
    cache: CacheType,
    longest: usize,
    fixed: &[f64],
) -> Result<Chosen> {
    let launch = |ctx: usize, ts: &[f64]| Launch {
        ctx,
        flash: true,
        cache_k: cache,
        cache_v: cache,
        outputs: Some(1),
        tensor_split: ts.to_vec(),
        ..Launch::default()
    };
    let fits = |ctx: usize, ts: &[f64]| -> Result<bool> {
        Ok(needs(cfg, tensors, &launch(ctx, ts))?.iter().zip(budgets).all(|(n, b)| n <= b))
    };
    let (mut ts, rounds) = match fixed {
        [] => (budgets.iter().map(|&b| (b / 1048576) as f64).collect::<Vec<_>>(), 4),
        given => (given.to_vec(), 1),
    };
    let mut best: Option<(usize, Vec<f64>)> = None;
    for round in 1..=rounds {
        let found = largest(CELLS, longest, CELLS, |ctx| fits(ctx, &ts))?;
        if let Some(ctx) = found.filter(|&c| best.as_ref().is_none_or(|(b, _)| c > *b)) {
            best = Some((ctx, ts.clone()));
        }
        if round == rounds {
            break;
        }
        let at = best.as_ref().map_or(CELLS, |(c, _)| *c);
        let n = needs(cfg, tensors, &launch(at, &ts))?;
        // Whole MiB: what `-ts` is printed in.
        ts = ts
            .iter()
            .zip(&n)
            .zip(budgets)
            .map(|((t, &n), &b)| (t * b as f64 / n.max(1) as f64).round().max(1.0))
            .collect();
    }
    let Some((ctx, ts)) = best else { return Ok(None) };
    let l = launch(ctx, &ts);
    let n = needs(cfg, tensors, &l)?;
    Ok(Some((l, n)))
}

/// A launch over several cards and each card's need, or None where nothing fits.
type Chosen = Option<(Launch, Vec<u64>)>;

/// `plan --engine llama.cpp --cards A,B`: per type and cache, every layer on the cards (`-sm
/// layer`) with the `-ts` that reaches the longest context, each card with the margin left free
/// (`split` given: that `-ts`). Not yet measured on several GPUs.
pub fn plan_cards(
    s: &mut Session,
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    types: &[FileType],
    cards: &[Card],
    split: &[f64],
    margin_mib: f64,
) -> Result<StageOutput> {
    let margin = (margin_mib.max(0.0) * 1048576.0) as u64;
    let budgets: Vec<u64> = cards.iter().map(|c| c.total_bytes().saturating_sub(margin)).collect();
    let longest = (cfg.max_position_embeddings / CELLS).max(1) * CELLS;
    let names: Vec<&str> = cards.iter().map(|c| c.name.as_str()).collect();
    let mut out = StageOutput::default();
    let mut rows: Vec<(String, CacheType, Chosen)> = Vec::new();
    for (what, tensors) in priced(cfg, gguf, types)? {
        for cache in [CacheType::F16, CacheType::Q8_0] {
            let chosen = split_for(cfg, &tensors, &budgets, cache, longest, split)?;
            rows.push((what.clone(), cache, chosen));
        }
    }
    for (what, cache, chosen) in &rows {
        let said = match chosen {
            Some((l, n)) => format!(
                "llama-server -m MODEL.gguf {} — {} MiB as nvidia-smi would list each (not yet measured on several GPUs)",
                l.flags(),
                n.iter().map(|b| format!("{:.0}", mib(*b))).collect::<Vec<_>>().join(" + ")
            ),
            None => "does not fit with every layer on the cards".into(),
        };
        s.say(format!(
            "{what} on {} (a {margin_mib:.0} MiB margin each), cache {}: {said}",
            names.join(" + "),
            cache_name(*cache)
        ));
        out.findings.push(
            Finding::new(
                format!("llama.cpp {what} on {}, cache {}: the longest context", names.join("+"), cache_name(*cache)),
                "tokens",
                None,
            )
            .predicted(chosen.as_ref().map(|(l, _)| l.ctx as f64))
            .note(said),
        );
    }
    // One row per card: the launch's context and flags, the card's need.
    let (mut model, mut cache_col, mut device, mut seq, mut need, mut card_mib, mut command) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (what, cache, chosen) in &rows {
        for (d, card) in cards.iter().enumerate() {
            model.push(what.clone());
            cache_col.push(cache_name(*cache));
            device.push(format!("cuda{d} {}", card.name));
            seq.push(chosen.as_ref().map(|(l, _)| l.ctx as u64));
            need.push(chosen.as_ref().map(|(_, n)| mib(n[d])));
            card_mib.push(card.total_mib);
            command.push(match chosen {
                Some((l, _)) => format!("llama-server -m MODEL.gguf {}", l.flags()),
                None => "does not fit".into(),
            });
        }
    }
    out.table(
        PLAN_LLAMACPP_CARDS,
        df!(
            col::MODEL => model,
            col::CACHE => cache_col,
            col::DEVICE => device,
            col::SEQ => seq,
            col::NEED_MIB => need,
            col::CARD_MIB => card_mib,
            col::COMMAND => command,
        )?,
    );
    Ok(out)
}

/// One row of the plan: the launch chosen and what it needs (None: nothing fits).
struct Row {
    what: String,
    launch: Launch,
    need: Option<u64>,
}

impl Row {
    fn command(&self) -> String {
        match self.need {
            None => "does not fit".into(),
            Some(_) => format!("llama-server -m MODEL.gguf {}", self.launch.flags()),
        }
    }
}

/// The smallest `x` in `lo..=hi` with `fits(x)`, when `fits(hi)`; fits is taken as monotone.
fn smallest(lo: usize, hi: usize, fits: impl Fn(usize) -> Result<bool>) -> Result<Option<usize>> {
    if !fits(hi)? {
        return Ok(None);
    }
    let (mut bad, mut good) = (lo, hi);
    if fits(lo)? {
        return Ok(Some(lo));
    }
    while good - bad > 1 {
        let mid = (good + bad) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(Some(good))
}

/// The largest `x` in `lo..=hi` (stepping by `step`) with `fits(x)`, when `fits(lo)`; fits is
/// taken as monotone.
fn largest(lo: usize, hi: usize, step: usize, fits: impl Fn(usize) -> Result<bool>) -> Result<Option<usize>> {
    if !fits(lo)? {
        return Ok(None);
    }
    let (mut good, mut bad) = (lo / step, hi / step + 1);
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        if fits(mid * step)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(Some(good * step))
}

pub fn plan(
    s: &mut Session,
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    types: &[FileType],
    seq: usize,
    margin_mib: f64,
) -> Result<StageOutput> {
    let card = match s.card() {
        Some(card) => card.clone(),
        None => Card::parse("rtx4090")?,
    };
    let margin = (margin_mib.max(0.0) * 1048576.0) as u64;
    let budget = card.total_bytes().saturating_sub(margin);
    let longest = (cfg.max_position_embeddings / CELLS).max(1) * CELLS;
    let mut rows = Vec::new();
    for (what, tensors) in priced(cfg, gguf, types)? {
        for cache in [CacheType::F16, CacheType::Q8_0] {
            let launch = |ctx: usize, gpu_layers: Option<usize>, n_cpu_moe: Option<usize>| Launch {
                ctx,
                gpu_layers,
                n_cpu_moe,
                flash: true,
                cache_k: cache,
                cache_v: cache,
                // llama-server with one slot (`-np 1`, printed with the flags): the estimate prices
                // one sequence, and the server reserves its compute buffer for one output a slot.
                outputs: Some(1),
                ..Launch::default()
            };
            let fits = |l: Launch| -> Result<bool> { Ok(need(cfg, &tensors, &l)? <= budget) };
            let layers = cfg.num_hidden_layers;
            let moe = cfg.experts().is_some();
            let (chosen, fitted) = match largest(CELLS, longest, CELLS, |ctx| fits(launch(ctx, None, None)))? {
                Some(ctx) => (launch(ctx, None, None), true),
                None => {
                    let ctx = seq.min(longest);
                    let experts_out = match moe {
                        true => smallest(1, layers, |n| fits(launch(ctx, None, Some(n))))?,
                        false => None,
                    };
                    // A mixture whose every expert is on the host and still does not fit gives up
                    // layers too, their experts still on the host.
                    let all_out = moe.then_some(layers);
                    match experts_out {
                        Some(n) => (launch(ctx, None, Some(n)), true),
                        None => match largest(0, layers + 1, 1, |n| fits(launch(ctx, Some(n), all_out)))? {
                            Some(n) => (launch(ctx, Some(n), all_out), true),
                            None => (launch(ctx, Some(0), all_out), false),
                        },
                    }
                }
            };
            let need = if fitted { Some(need(cfg, &tensors, &chosen)?) } else { None };
            rows.push(Row { what: what.clone(), launch: chosen, need });
        }
    }
    let mut out = StageOutput::default();
    for r in &rows {
        s.say(format!(
            "{} on {} (a {margin_mib:.0} MiB margin), cache {}: {}{}",
            r.what,
            card.label,
            cache_name(r.launch.cache_k),
            r.command(),
            r.need.map(|n| format!(" — {:.0} MiB as nvidia-smi would list it", mib(n))).unwrap_or_default()
        ));
        out.findings.push(
            Finding::new(
                format!(
                    "llama.cpp {} on {}, cache {}: the need planned",
                    r.what,
                    card.name,
                    cache_name(r.launch.cache_k)
                ),
                "MiB",
                None,
            )
            .predicted(r.need.map(mib))
            .note(r.command()),
        );
    }
    out.table(
        PLAN_LLAMACPP,
        df!(
            col::MODEL => rows.iter().map(|r| r.what.clone()).collect::<Vec<_>>(),
            col::CACHE => rows.iter().map(|r| cache_name(r.launch.cache_k)).collect::<Vec<_>>(),
            col::NGL => rows.iter().map(|r| r.launch.gpu_layers.map(|n| n as u64).unwrap_or(99)).collect::<Vec<_>>(),
            col::N_CPU_MOE => rows.iter().map(|r| r.launch.n_cpu_moe.map(|n| n as u64)).collect::<Vec<_>>(),
            col::SEQ => rows.iter().map(|r| r.launch.ctx as u64).collect::<Vec<_>>(),
            col::NEED_MIB => rows.iter().map(|r| r.need.map(mib)).collect::<Vec<_>>(),
            col::CARD_MIB => rows.iter().map(|_| card.total_mib).collect::<Vec<_>>(),
            col::COMMAND => rows.iter().map(Row::command).collect::<Vec<_>>(),
        )?,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_finds_the_first_that_fits() {
        assert_eq!(smallest(1, 48, |n| Ok(n >= 17)).unwrap(), Some(17));
        assert_eq!(smallest(1, 48, |_| Ok(true)).unwrap(), Some(1));
        assert_eq!(smallest(1, 48, |_| Ok(false)).unwrap(), None);
    }

    #[test]
    fn largest_finds_the_edge_by_steps() {
        let r = largest(256, 32768, 256, |x| Ok(x <= 10_000)).unwrap();
        assert_eq!(r, Some(9984));
        assert_eq!(largest(256, 32768, 256, |_| Ok(false)).unwrap(), None);
        assert_eq!(largest(256, 1024, 256, |_| Ok(true)).unwrap(), Some(1024));
    }
}
