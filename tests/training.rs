//! A training step on the tiny preset, on CPU: every weight a `Var`, a forward through the ops
//! that record their backward (`AttentionMode::Differentiable`), cross-entropy, backward, AdamW.
//! The gradients and the optimizer states it holds are the bytes `estimate::training` predicts.
//! The lab's counting allocator is installed in this binary (one test), so heap bytes are exact.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer as _, ParamsAdamW};
use vram_lab::estimate::training::{ledger, TrainSetup};
use vram_lab::memory::host::{self, CountingAlloc};
use vram_lab::model::weights::Weight;
use vram_lab::model::{AttentionMode, CacheKind, Logits, Precision, Qwen2};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
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
    let mut model = Qwen2::new(&cfg, Precision::F32, weights, &Device::Cpu).unwrap();
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
    assert!((0.0..0.01).contains(&overhead), "AdamW holds {states} B, the ledger says {} (+{:.3} %)", want.optimizer, 100.0 * overhead);
    // A step changes the weights and keeps no more state.
    let w0 = vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let held = host::allocated();
    opt.step(&grads).unwrap();
    assert!(host::allocated() <= held + (1 << 16), "the step kept {} B more", host::allocated() - held);
    assert_ne!(vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), w0);
}
