//! The lab's Qwen2 against stock candle-transformers' Qwen2 on the same weights (F32, tiny).

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::qwen2 as stock;
use vram_lab::model::decoder::last_logits;
use vram_lab::model::load::synthetic::Synthetic;
use vram_lab::model::load::weights::Weight;
use vram_lab::model::{AttentionMode, Decoder, DecoderConfig, Logits, Precision};

const SEED: u64 = 7;

fn stock_config(cfg: &DecoderConfig) -> stock::Config {
    let mut v = serde_json::to_value(cfg).unwrap();
    let o = v.as_object_mut().unwrap();
    o.insert("sliding_window".into(), serde_json::json!(cfg.max_position_embeddings));
    o.insert("max_window_layers".into(), serde_json::json!(cfg.num_hidden_layers));
    o.insert("use_sliding_window".into(), serde_json::json!(false));
    serde_json::from_value(v).unwrap()
}

fn lab_model(cfg: &DecoderConfig) -> Decoder {
    let w = common::tensors(cfg, SEED).into_iter().map(|(k, v)| (k, Weight::Dense(v))).collect();
    Decoder::new(cfg, Precision::F32, w, &Device::Cpu).unwrap()
}

fn stock_model(cfg: &DecoderConfig) -> stock::ModelForCausalLM {
    let vb = VarBuilder::from_tensors(common::tensors(cfg, SEED), DType::F32, &Device::Cpu);
    stock::ModelForCausalLM::new(&stock_config(cfg), vb).unwrap()
}

fn lab_last(model: &Decoder, cache: &mut vram_lab::model::KvCache, ids: &[u32]) -> Tensor {
    let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    last_logits(&model.forward(&t, cache, Logits::Last).unwrap()).unwrap()
}

fn stock_last(model: &mut stock::ModelForCausalLM, ids: &[u32], offset: usize) -> Tensor {
    let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&t, offset).unwrap().squeeze(1).unwrap()
}

#[test]
fn same_logits_as_candle_transformers_whole_prompt() {
    let cfg = common::tiny();
    let lab = lab_model(&cfg);
    let mut stock = stock_model(&cfg);
    let ids = common::ids(37, cfg.vocab_size, 1);
    let mut cache = lab.new_cache(1, 64).unwrap();
    let a = lab_last(&lab, &mut cache, &ids);
    let b = stock_last(&mut stock, &ids, 0);
    let scale = common::max_abs(&b);
    assert!(scale > 1e-3, "logits must not be trivially zero");
    let d = common::max_abs_diff(&a, &b);
    assert!(d < 1e-4 * scale.max(1.0), "max diff {d} (scale {scale})");
}

#[test]
fn prefix_plus_continuation_and_token_by_token_match() {
    let cfg = common::tiny();
    let lab = lab_model(&cfg);
    let ids = common::ids(40, cfg.vocab_size, 2);
    let mut whole = lab.new_cache(1, 64).unwrap();
    let reference = lab_last(&lab, &mut whole, &ids);

    // Prefix of 25 then a multi-token continuation of 15, for both models.
    let mut stock = stock_model(&cfg);
    stock_last(&mut stock, &ids[..25], 0);
    let stock_split = stock_last(&mut stock, &ids[25..], 25);
    let mut cache = lab.new_cache(1, 64).unwrap();
    lab_last(&lab, &mut cache, &ids[..25]);
    let lab_split = lab_last(&lab, &mut cache, &ids[25..]);
    assert_eq!(cache.len(), 40);
    assert!(common::max_abs_diff(&lab_split, &reference) < 1e-4);
    assert!(common::max_abs_diff(&lab_split, &stock_split) < 1e-4);

    // One token at a time.
    let mut cache = lab.new_cache(1, 64).unwrap();
    let mut last = None;
    for &t in &ids {
        last = Some(lab_last(&lab, &mut cache, &[t]));
    }
    assert!(common::max_abs_diff(&last.unwrap(), &reference) < 1e-4);
}

#[test]
fn all_logits_match_last_and_naive_attention_agrees() {
    let cfg = common::tiny();
    let mut lab = lab_model(&cfg);
    let ids = common::ids(33, cfg.vocab_size, 3);
    let t = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let mut c1 = lab.new_cache(1, 64).unwrap();
    let all = lab.forward(&t, &mut c1, Logits::All).unwrap();
    let rows: usize = all.iter().map(|x| x.dim(1).unwrap()).sum();
    assert_eq!(rows, 33);
    let mut c2 = lab.new_cache(1, 64).unwrap();
    let last = lab_last(&lab, &mut c2, &ids);
    assert!(common::max_abs_diff(&last_logits(&all).unwrap(), &last) < 1e-5);

    lab.attention = AttentionMode::Naive;
    let mut c3 = lab.new_cache(1, 64).unwrap();
    let naive = lab_last(&lab, &mut c3, &ids);
    assert!(common::max_abs_diff(&naive, &last) < 1e-4);
    // A tiny budget forces one query row per chunk.
    lab.attention = AttentionMode::Bounded { budget: 1 };
    let mut c4 = lab.new_cache(1, 64).unwrap();
    let chunked = lab_last(&lab, &mut c4, &ids);
    assert!(common::max_abs_diff(&chunked, &last) < 1e-4);
}

#[test]
fn bf16_stays_close_to_f32() {
    let cfg = common::tiny();
    let f32_model = lab_model(&cfg);
    let mut src = Synthetic::new(cfg.clone(), SEED);
    let w =
        vram_lab::model::load::weights::load_all(&cfg, &mut src, Precision::Bf16, &Device::Cpu, None, |_, _| Ok(()))
            .unwrap();
    let bf16 = Decoder::new(&cfg, Precision::Bf16, w, &Device::Cpu).unwrap();
    let ids = common::ids(20, cfg.vocab_size, 4);
    let a = lab_last(&f32_model, &mut f32_model.new_cache(1, 32).unwrap(), &ids);
    let b = lab_last(&bf16, &mut bf16.new_cache(1, 32).unwrap(), &ids);
    let rel = common::max_abs_diff(&a, &b) / common::max_abs(&a);
    assert!(rel < 0.05, "bf16 relative error {rel}");
    assert_eq!(bf16.weight_bytes(), vram_lab::estimate::weight_bytes(&cfg, Precision::Bf16));
}

#[test]
fn kv_cache_full_is_an_error_not_a_panic() {
    let cfg = common::tiny();
    let lab = lab_model(&cfg);
    let mut cache = lab.new_cache(1, 8).unwrap();
    let t = Tensor::new(common::ids(9, cfg.vocab_size, 5).as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let err = lab.forward(&t, &mut cache, Logits::Last).expect_err("must fail");
    assert!(err.to_string().contains("KV cache full"), "{err}");
}

/// Stacked q|k|v and gate|up (decoding's fewer launches) compute what the separate products do:
/// the same logits token by token as the separate model and stock candle-transformers, with the
/// weights' bytes unchanged.
#[test]
fn fused_projections_decode_the_same_tokens() {
    use vram_lab::model::generate::argmax;
    let cfg = common::tiny();
    let separate = lab_model(&cfg);
    let mut fused = lab_model(&cfg);
    assert_eq!(fused.fuse_projections().unwrap(), cfg.num_hidden_layers);
    assert_eq!(fused.weight_bytes(), separate.weight_bytes());
    let ids = common::ids(9, cfg.vocab_size, 3);
    let (mut c1, mut c2) = (separate.new_cache(1, 32).unwrap(), fused.new_cache(1, 32).unwrap());
    let mut stock = stock_model(&cfg);
    let (mut a, mut b, mut r) =
        (lab_last(&separate, &mut c1, &ids), lab_last(&fused, &mut c2, &ids), stock_last(&mut stock, &ids, 0));
    for offset in ids.len()..ids.len() + 6 {
        let scale = common::max_abs(&r).max(1.0);
        assert!(common::max_abs_diff(&a, &b) < 1e-4 * scale, "fused vs separate");
        assert!(common::max_abs_diff(&b, &r) < 1e-4 * scale, "fused vs candle-transformers");
        let next = argmax(&b).unwrap()[0];
        assert_eq!(next, argmax(&r).unwrap()[0]);
        a = lab_last(&separate, &mut c1, &[next]);
        b = lab_last(&fused, &mut c2, &[next]);
        r = stock_last(&mut stock, &[next], offset);
    }
}
