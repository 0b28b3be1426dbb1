//! A training step on the tiny preset, on CPU: every weight a `Var`, a forward through the ops
//! that record their backward (`AttentionMode::Differentiable`), cross-entropy, backward, AdamW.
//! The gradients and the optimizer states it holds are the bytes `estimate::training` predicts.
//! The lab's counting allocator is installed in this binary (one test), so heap bytes are exact.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use vram_lab::estimate::training::{graph, ledger, step_activations, TrainSetup, TrainShape};
use vram_lab::memory::host::{self, CountingAlloc};
use vram_lab::model::load::synthetic::Synthetic;
use vram_lab::model::load::weights::load_all;
use vram_lab::model::load::weights::Weight;
use vram_lab::model::train::optim::{AdamW, ParamsAdamW, UPDATE_COPIES};
use vram_lab::model::{train, AttentionMode, CacheKind, Decoder, Logits, Precision};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// One test function: the counter is process-wide, so the checks run one after another.
#[test]
fn training_memory_is_what_the_formulas_say() {
    a_training_step_holds_what_the_ledger_says();
    the_forward_keeps_what_the_graph_formula_counts();
}

fn a_training_step_holds_what_the_ledger_says() {
    let cfg = common::tiny();
    let mut vars = Vec::new();
    let mut weights = std::collections::HashMap::new();
    for (name, t) in common::tensors(&cfg, 3) {
        let v = Var::from_tensor(&t.to_dtype(DType::F32).unwrap()).unwrap();
        weights.insert(name, Weight::Dense(v.as_tensor().clone()));
        vars.push(v);
    }
    let params: u64 = vars.iter().map(|v| v.elem_count() as u64).sum();
    assert_eq!(params as usize, cfg.param_count());
    let mut model = Decoder::new(&cfg, Precision::F32, weights, &Device::Cpu).unwrap();
    model.attention = AttentionMode::Differentiable;

    let ids = common::ids(33, cfg.vocab_size, 9);
    let input = Tensor::new(&ids[..32], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let target = Tensor::new(&ids[1..], &Device::Cpu).unwrap();
    // A concatenating cache keeps K and V in the graph (the preallocated one writes in place).
    let mut cache = model.new_cache_of(CacheKind::Concat, 1, 32).unwrap();
    let logits = model.forward(&input, &mut cache, Logits::All).unwrap();
    let logits = Tensor::cat(&logits, 1).unwrap().squeeze(0).unwrap();
    let loss = candle_nn::loss::cross_entropy(&logits, &target).unwrap();
    let grads = loss.backward().unwrap();

    // Every weight got a gradient of its own size: F32 gradients of every parameter.
    let setup = TrainSetup::fp32_adam();
    let want = ledger(params, &setup);
    let mut grad_bytes = 0u64;
    for v in &vars {
        let g = grads.get(v).unwrap_or_else(|| panic!("a weight of shape {:?} got no gradient", v.shape()));
        assert_eq!(g.shape(), v.shape());
        grad_bytes += (g.elem_count() * g.dtype().size_in_bytes()) as u64;
    }
    assert_eq!(grad_bytes, want.gradients);

    // AdamW allocates its two F32 moments per parameter when it is made.
    let before = host::allocated();
    let mut opt = AdamW::new(vars.clone(), ParamsAdamW::default()).unwrap();
    let states = host::allocated() - before;
    let overhead = states as f64 / want.optimizer as f64 - 1.0;
    assert!(
        (0.0..0.01).contains(&overhead),
        "AdamW holds {states} B, the ledger says {} (+{:.3} %)",
        want.optimizer,
        100.0 * overhead
    );
    // A step changes the weights and keeps no more state; at its busiest it holds three tensors the
    // size of the largest weight beside the gradients (the in-place update), what the ledger's
    // update peak counts above them.
    let w0 = vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let held = host::allocated();
    host::reset_peak();
    opt.step(&grads).unwrap();
    assert!(host::allocated() <= held + (1 << 16), "the step kept {} B more", host::allocated() - held);
    assert_ne!(vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), w0);
    let largest = vars.iter().map(|v| v.elem_count() as u64).max().unwrap() * 4;
    let update = host::peak() - held;
    assert!(
        update >= UPDATE_COPIES * largest && update < UPDATE_COPIES * largest + (1 << 16),
        "the update held {update} B above the gradients, the ledger {} B",
        UPDATE_COPIES * largest
    );
}

/// What the forward keeps for the backward, as `estimate::training::graph` counts it: equal to the
/// byte between two shapes (the host's per-tensor bookkeeping, the same count of tensors in both,
/// cancels), and the plain step's backward peak within 1 %.
fn the_forward_keeps_what_the_graph_formula_counts() {
    let cfg = common::tiny();
    let mut source = Synthetic::new(cfg.clone(), 3);
    let w = load_all(&cfg, &mut source, Precision::F32, &Device::Cpu, None, |_, _| Ok(())).unwrap();
    let model = train::trainable(Decoder::new(&cfg, Precision::F32, w, &Device::Cpu).unwrap()).unwrap();
    let params: u64 = model.vars().unwrap().iter().map(|v| v.elem_count() as u64).sum();
    let measure = |batch: usize, seq: usize| -> (u64, u64) {
        let ids = Tensor::from_vec(common::ids(batch * (seq + 1), cfg.vocab_size, 4), (batch, seq + 1), &Device::Cpu)
            .unwrap();
        let (input, target) = train::shift(&ids).unwrap();
        // Once to warm the allocator's and kernels' scratch, once measured.
        train::gradients(&model, &input, &target, false, &mut || ()).unwrap();
        let base = host::allocated();
        host::reset_peak();
        let mut kept = 0;
        let step = train::gradients(&model, &input, &target, false, &mut || kept = host::allocated() - base).unwrap();
        let peak = host::peak() - base;
        drop(step);
        (kept, peak)
    };
    let shapes = [TrainShape { batch: 1, seq: 32 }, TrainShape { batch: 2, seq: 64 }];
    let got: Vec<(u64, u64)> = shapes.iter().map(|sh| measure(sh.batch, sh.seq)).collect();
    let want: Vec<u64> = shapes.iter().map(|sh| graph(&cfg, *sh)).collect();
    assert_eq!(got[1].0 - got[0].0, want[1] - want[0], "graph growth from {:?} to {:?}", shapes[0], shapes[1]);
    for (sh, (_, peak)) in shapes.iter().zip(&got) {
        let lab = step_activations(&cfg, params, *sh, false).peak;
        let err = (*peak as f64 - lab as f64).abs() / *peak as f64;
        assert!(err < 0.01, "{sh:?}: backward peak {peak} B measured, {lab} B by the formula ({:.2} %)", 100.0 * err);
    }
}
