//! The offload placements compute the same model: split (CPU layers through the host
//! matrix-vector product), streamed (weights copied into reusable buffers on the schedule the GPU
//! uses) and hybrid give the full model's greedy tokens and logits. On CPU the "GPU" is the CPU
//! too, so what is tested is the bookkeeping: which layer runs where, its cache, the slots.

mod common;

use candle_core::{DType, Device, Tensor};
use vram_lab::model::decoder::last_logits;
use vram_lab::model::load::weights::Weight;
use vram_lab::model::offload::placement::{Home, Placement, Strategy};
use vram_lab::model::{generate, Decoder, DecoderConfig, GenerateConfig, Logits, Precision};

const SEED: u64 = 5;

fn cfg() -> DecoderConfig {
    let mut cfg = common::tiny();
    cfg.num_hidden_layers = 5;
    cfg
}

fn weights(cfg: &DecoderConfig, dtype: DType) -> std::collections::HashMap<String, Weight> {
    common::tensors(cfg, SEED).into_iter().map(|(k, v)| (k, Weight::Dense(v.to_dtype(dtype).unwrap()))).collect()
}

fn placement(strategy: Strategy, layers: &[Home], slots: usize) -> Placement {
    Placement { strategy, embed: Home::Cpu, layers: layers.to_vec(), head: Home::Gpu, slots }
}

fn logits(model: &Decoder, ids: &[u32]) -> Tensor {
    let mut cache = model.new_cache(1, ids.len() + 1).unwrap();
    let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    // A prefill, then one decode step: both paths through every layer.
    model.forward(&t.narrow(1, 0, ids.len() - 1).unwrap(), &mut cache, Logits::Last).unwrap();
    last_logits(&model.forward(&t.narrow(1, ids.len() - 1, 1).unwrap(), &mut cache, Logits::Last).unwrap()).unwrap()
}

#[test]
fn every_placement_gives_the_full_models_tokens() {
    use Home::*;
    let cfg = cfg();
    let full = Decoder::new(&cfg, Precision::F32, weights(&cfg, DType::F32), &Device::Cpu).unwrap();
    let prompt = common::ids(11, cfg.vocab_size, 3);
    let gen = GenerateConfig { max_new_tokens: 12, stop_at_eos: false, ..Default::default() };
    let want = generate(&full, &prompt, &gen).unwrap().generated_ids;
    let want_logits = logits(&full, &prompt);
    let cases = [
        placement(Strategy::Split, &[Gpu, Gpu, Cpu, Cpu, Cpu], 0),
        placement(Strategy::Streamed, &[Gpu, Streamed, Streamed, Streamed, Streamed], 2),
        // Three streamed layers in two slots: a layer changes slot from one token to the next.
        placement(Strategy::Streamed, &[Gpu, Gpu, Streamed, Streamed, Streamed], 2),
        placement(Strategy::Hybrid, &[Gpu, Cpu, Streamed, Cpu, Streamed], 2),
        placement(Strategy::Streamed, &[Streamed, Streamed, Gpu, Gpu, Gpu], 2),
    ];
    for p in cases {
        let model = Decoder::new_placed(&cfg, Precision::F32, weights(&cfg, DType::F32), &Device::Cpu, &p).unwrap();
        assert_eq!(model.stream_buffers().is_some(), p.count(Streamed) > 0);
        let got = generate(&model, &prompt, &gen).unwrap().generated_ids;
        assert_eq!(got, want, "{:?}", p.layers);
        let d = common::max_abs_diff(&logits(&model, &prompt), &want_logits);
        assert!(d < 1e-4, "{:?}: logits differ by {d}", p.layers);
    }
}

/// Each model times its own CPU layers: per decoding step, their products read exactly their
/// weights' bytes, and a model beside it in the same process reads nothing.
#[test]
fn a_model_profiles_its_own_cpu_layers() {
    use Home::*;
    let cfg = cfg();
    let w = weights(&cfg, DType::F32);
    let cpu_layer =
        |k: &str| ["model.layers.2.", "model.layers.3.", "model.layers.4."].iter().any(|l| k.starts_with(l));
    let cpu_bytes: u64 =
        w.iter().filter(|(k, _)| cpu_layer(k) && k.ends_with("proj.weight")).map(|(_, v)| v.bytes()).sum();
    let split = placement(Strategy::Split, &[Gpu, Gpu, Cpu, Cpu, Cpu], 0);
    let model = Decoder::new_placed(&cfg, Precision::F32, w, &Device::Cpu, &split).unwrap();
    let full = Decoder::new(&cfg, Precision::F32, weights(&cfg, DType::F32), &Device::Cpu).unwrap();
    let gen = GenerateConfig { max_new_tokens: 12, stop_at_eos: false, ..Default::default() };
    let prompt = common::ids(11, cfg.vocab_size, 3);
    generate(&model, &prompt, &gen).unwrap();
    generate(&full, &prompt, &gen).unwrap();
    let p = model.take_profile();
    // The prefill makes the first token; each of the other 11 is one decoding step.
    assert_eq!((p.steps, p.kernel_bytes), (11, cpu_bytes as f64));
    assert!(p.kernel_s > 0.0 && p.cpu_layers_s >= p.kernel_s, "{p:?}");
    assert_eq!(full.take_profile().kernel_bytes, 0.0);
    assert_eq!(model.take_profile().kernel_bytes, 0.0, "taken once");
}

#[test]
fn a_wrong_slot_schedule_would_show() {
    // The check above can fail: a model whose streamed layers all ran the first one's weights
    // gives other logits. Emulated by giving layer 2 the weights of layer 1.
    use Home::*;
    let cfg = cfg();
    let full = Decoder::new(&cfg, Precision::F32, weights(&cfg, DType::F32), &Device::Cpu).unwrap();
    let mut w = weights(&cfg, DType::F32);
    for (k, v) in weights(&cfg, DType::F32) {
        if let Some(rest) = k.strip_prefix("model.layers.1.") {
            w.insert(format!("model.layers.2.{rest}"), v);
        }
    }
    let p = placement(Strategy::Streamed, &[Gpu, Streamed, Streamed, Gpu, Gpu], 2);
    let wrong = Decoder::new_placed(&cfg, Precision::F32, w, &Device::Cpu, &p).unwrap();
    let prompt = common::ids(11, cfg.vocab_size, 3);
    assert!(common::max_abs_diff(&logits(&wrong, &prompt), &logits(&full, &prompt)) > 1e-3);
}

#[test]
fn bf16_split_stays_close_to_the_full_model() {
    use Home::*;
    let cfg = cfg();
    let full = Decoder::new(&cfg, Precision::Bf16, weights(&cfg, DType::BF16), &Device::Cpu).unwrap();
    let p = placement(Strategy::Split, &[Gpu, Cpu, Cpu, Cpu, Cpu], 0);
    let split = Decoder::new_placed(&cfg, Precision::Bf16, weights(&cfg, DType::BF16), &Device::Cpu, &p).unwrap();
    let prompt = common::ids(11, cfg.vocab_size, 4);
    let (a, b) = (logits(&full, &prompt), logits(&split, &prompt));
    // BF16 activations round at every layer; the two products differ only in summation order.
    let scale = a.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(common::max_abs_diff(&a, &b) < 0.05 * scale, "{} vs scale {scale}", common::max_abs_diff(&a, &b));
}

#[test]
fn a_placement_for_another_model_is_refused() {
    let cfg = cfg();
    let p = Placement::full(3);
    let e = Decoder::new_placed(&cfg, Precision::F32, weights(&cfg, DType::F32), &Device::Cpu, &p)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("placement of 3 layers"), "{e}");
}
