//! Property tests over the lab's arithmetic: for any config inside the ceilings of `limits.rs` and
//! any workload the estimator accepts, the estimator, the planner's limits, the offload placement
//! and the allocator model return without a panic (test builds check every overflow), and what
//! must be monotone is: more context or a larger batch never needs less memory, a bigger card or
//! budget never fits less. Outside the ceilings a config is refused with a line naming the field.

use proptest::prelude::*;
use vram_lab::estimate::fit::{self, Inference};
use vram_lab::estimate::pool::{self, AllocModel};
use vram_lab::limits::*;
use vram_lab::memory::policy::Policy;
use vram_lab::model::layers::attention::AttentionMode;
use vram_lab::model::offload::placement::{Bandwidths, PartBytes, Placement, Strategy as Place};
use vram_lab::model::{DecoderConfig, Logits, Precision};

/// Mostly small values (where real models live), sometimes anywhere up to the ceiling.
fn upto(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![3 => 1..=64usize.min(max), 2 => 1..=4096usize.min(max), 1 => 1..=max, 1 => Just(max)]
}

fn config() -> impl Strategy<Value = DecoderConfig> {
    // heads = kv heads × group, hidden = heads × an even head size: every config is consistent.
    (
        1..=32usize,
        1..=16usize,
        1..=256usize,
        upto(MAX_INTERMEDIATE),
        upto(MAX_LAYERS),
        upto(MAX_VOCAB),
        upto(MAX_SEQ),
        any::<bool>(),
    )
        .prop_map(|(kv, group, half_head, intermediate, layers, vocab, positions, tie)| {
            let mut cfg = DecoderConfig::preset("tiny").unwrap();
            cfg.num_key_value_heads = kv;
            cfg.num_attention_heads = kv * group;
            cfg.hidden_size = kv * group * half_head * 2;
            cfg.intermediate_size = intermediate;
            cfg.num_hidden_layers = layers;
            cfg.vocab_size = vocab;
            cfg.max_position_embeddings = positions;
            cfg.tie_word_embeddings = tie;
            cfg
        })
}

fn workload() -> impl Strategy<Value = Inference> {
    let precision = prop_oneof![Just(Precision::F32), Just(Precision::Bf16), Just(Precision::Q4)];
    let logits = prop_oneof![Just(Logits::Last), Just(Logits::All)];
    let attention = prop_oneof![Just(AttentionMode::default()), Just(AttentionMode::Naive), Just(AttentionMode::Flash)];
    (precision, upto(MAX_SEQ), upto(MAX_BATCH), logits, attention).prop_map(
        |(precision, seq, batch, logits, attention)| Inference {
            precision,
            seq,
            batch,
            logits,
            attention,
            stored: None,
            allocator: Default::default(),
        },
    )
}

const RUNTIME: u64 = 700 << 20;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Inside the ceilings every config passes its own validation, and every workload is either
    /// priced (its ledger's parts add up) or refused as too large, never a panic.
    #[test]
    fn the_estimator_prices_or_refuses(cfg in config(), w in workload()) {
        let json = serde_json::to_string(&cfg).unwrap();
        prop_assert!(DecoderConfig::from_json(&json, "generated").is_ok());
        match fit::check(&cfg, &w) {
            Ok(()) => {
                let l = fit::ledger(&cfg, &w, RUNTIME);
                prop_assert_eq!(l.device(), l.weights + l.workspace + l.kv_cache + l.logits + l.transient + l.pool + l.runtime);
                let f = fit::on_card(&cfg, &w, RUNTIME, 24 << 30, Some(1008.0));
                prop_assert_eq!(f.need, l.device());
            }
            Err(e) => prop_assert!(e.to_string().contains("too large to price"), "{}", e),
        }
    }

    /// More context, or a larger batch, never needs less memory, but for what a budget holds:
    /// bounded attention's chunk is budget / one query row's scores, rounded down
    /// (`attention::bounded`), so one more row can shorten every chunk and its busiest score
    /// matrix fall (batch 23 → 24 at 690 tokens, 6 heads, 256 MiB: 287 KiB less), never by more
    /// than the budget it is held under.
    #[test]
    fn more_tokens_never_need_less(cfg in config(), w in workload(), more in 1..=4096usize) {
        let longer = Inference { seq: (w.seq + more).min(MAX_SEQ), ..w };
        let wider = Inference { batch: (w.batch + 1).min(MAX_BATCH), ..w };
        let held = match w.attention {
            AttentionMode::Bounded { budget } => budget as u64,
            _ => 0,
        };
        for bigger in [longer, wider] {
            if fit::check(&cfg, &w).is_ok() && fit::check(&cfg, &bigger).is_ok() {
                let (a, b) = (fit::ledger(&cfg, &w, RUNTIME), fit::ledger(&cfg, &bigger, RUNTIME));
                prop_assert!(b.device() + held >= a.device(), "{:?} needs {} < {} at {:?}", bigger, b.device(), a.device(), w);
            }
        }
    }

    /// A bigger card never fits a shorter context or a smaller batch.
    #[test]
    fn a_bigger_card_never_fits_less(cfg in config(), w in workload(), small in 1u64..=(1 << 40), extra in 0u64..=(1 << 40)) {
        prop_assume!(fit::check(&cfg, &w).is_ok());
        let (ctx, batch) = fit::limits(&cfg, &w, RUNTIME, small);
        let (ctx2, batch2) = fit::limits(&cfg, &w, RUNTIME, small + extra);
        prop_assert!(ctx2 >= ctx && batch2 >= batch, "{} B: ({}, {}); {} B: ({}, {})", small, ctx, batch, small + extra, ctx2, batch2);
        prop_assert!(ctx <= cfg.max_position_embeddings.max(w.seq) && batch <= 4096);
    }

    /// A placement fits its budget, and a larger budget never keeps fewer layers on the GPU.
    #[test]
    fn placements_fit_their_budget(cfg in config(), budget in 0u64..=(1 << 44), extra in 0u64..=(1 << 40), reserve in 0u64..=(1 << 34), s in 0..3usize) {
        let parts = PartBytes::new(&cfg, 2);
        let strategy = [Place::Split, Place::Streamed, Place::Hybrid][s];
        let bw = Bandwidths { device: 3000.0, pcie: 25.0, host: 50.0 };
        if let Ok(p) = Placement::for_budget(strategy, &parts, budget, reserve, Some(&bw)) {
            prop_assert!(p.gpu_bytes(&parts) + reserve <= budget, "{} + {} > {}", p.gpu_bytes(&parts), reserve, budget);
            let q = Placement::for_budget(strategy, &parts, budget + extra, reserve, Some(&bw)).unwrap();
            prop_assert!(q.count(vram_lab::model::offload::placement::Home::Gpu) >= p.count(vram_lab::model::offload::placement::Home::Gpu));
        }
    }

    /// The allocator model keeps live ≤ reserved ≤ capacity through any sequence of requests,
    /// frees and synchronisations, and refuses rather than over-commits.
    #[test]
    fn the_pool_model_never_overcommits(capacity in 1u64..=(1 << 36), ops in prop::collection::vec((0u8..3, 1u64..=(1 << 34)), 1..64), p in 0..3usize) {
        let mut m = AllocModel::new(pool::behaviour([Policy::Pool, Policy::Caching, Policy::Sync][p]), capacity);
        let mut live = Vec::new();
        for (op, bytes) in ops {
            match op {
                0 => if let Ok(h) = m.alloc(bytes) { live.push(h) },
                1 => if let Some(h) = live.pop() { m.free(h) },
                _ => m.synchronize(),
            }
            prop_assert!(m.allocated() <= m.reserved() && m.reserved() <= m.capacity, "{} {} {}", m.allocated(), m.reserved(), m.capacity);
        }
    }
}

/// Outside the ceilings each field is refused by name.
#[test]
fn configs_past_the_ceilings_are_refused_by_name() {
    let base = serde_json::to_value(DecoderConfig::preset("tiny").unwrap()).unwrap();
    for (field, value) in [
        ("vocab_size", MAX_VOCAB + 1),
        ("hidden_size", MAX_HIDDEN + 4),
        ("intermediate_size", MAX_INTERMEDIATE + 1),
        ("num_hidden_layers", MAX_LAYERS + 1),
        ("max_position_embeddings", MAX_SEQ + 1),
        ("num_key_value_heads", 0),
    ] {
        let mut v = base.clone();
        v[field] = value.into();
        let e = DecoderConfig::from_json(&v.to_string(), "x").unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}
