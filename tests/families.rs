//! Qwen3, Llama (with Llama 3.1's RoPE scaling), Mistral and the mixtures Qwen3-MoE and Mixtral
//! in the lab's one decoder against candle-transformers' own model of each family, on the same
//! random weights (F32, CPU): the same logits at every step of a greedy run and the same tokens. The norms' weights are drawn
//! away from 1 so a q norm applied to k (or not at all) shows.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, mistral, mixtral, qwen3, qwen3_moe};
use std::collections::HashMap;
use vram_lab::model::decoder::last_logits;
use vram_lab::model::load::weights::Weight;
use vram_lab::model::{Decoder, DecoderConfig, Logits, Precision};

const SEED: u64 = 11;
const NEW_TOKENS: usize = 8;

fn weights(cfg: &DecoderConfig) -> HashMap<String, Tensor> {
    let mut w = common::tensors(cfg, SEED);
    for (name, t) in w.iter_mut().filter(|(n, _)| n.ends_with("norm.weight")) {
        let n = t.elem_count();
        let phase = name.bytes().enumerate().map(|(i, b)| (i + 1) * b as usize).sum::<usize>() as f32;
        let v: Vec<f32> = (0..n).map(|i| 1.0 + 0.4 * (i as f32 * 0.7 + phase).sin()).collect();
        *t = Tensor::from_vec(v, t.shape(), &Device::Cpu).unwrap();
    }
    w
}

/// The lab's greedy run: the prompt, then NEW_TOKENS tokens one by one.
fn lab_run(cfg: &DecoderConfig, prompt: &[u32]) -> (Tensor, Vec<u32>) {
    let w = weights(cfg).into_iter().map(|(k, v)| (k, Weight::Dense(v))).collect();
    let model = Decoder::new(cfg, Precision::F32, w, &Device::Cpu).unwrap();
    let mut cache = model.new_cache(1, 64).unwrap();
    let mut step = |ids: &[u32]| {
        let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        last_logits(&model.forward(&t, &mut cache, Logits::Last).unwrap()).unwrap().flatten_all().unwrap()
    };
    greedy(prompt, &mut step)
}

/// Every step's logits (the prompt's last position, then each new token's) stacked, and the tokens.
fn greedy(prompt: &[u32], step: &mut dyn FnMut(&[u32]) -> Tensor) -> (Tensor, Vec<u32>) {
    let mut logits = vec![step(prompt)];
    let mut tokens = vec![argmax(&logits[0])];
    while tokens.len() < NEW_TOKENS {
        logits.push(step(&[*tokens.last().unwrap()]));
        tokens.push(argmax(logits.last().unwrap()));
    }
    (Tensor::stack(&logits, 0).unwrap(), tokens)
}

fn argmax(logits: &Tensor) -> u32 {
    logits.argmax(0).unwrap().to_scalar::<u32>().unwrap()
}

/// The lab's greedy run beside candle-transformers' (`forward(ids, offset)`: the last position's
/// logits) on the same prompt: every step's logits within 1e-4 of their scale, the same tokens.
fn same(cfg: &DecoderConfig, mut forward: impl FnMut(&Tensor, usize) -> Tensor) {
    let prompt = common::ids(23, cfg.vocab_size, 5);
    let mut offset = 0;
    let mut step = |ids: &[u32]| {
        let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let out = forward(&t, offset).flatten_all().unwrap();
        offset += ids.len();
        out
    };
    let stock = greedy(&prompt, &mut step);
    let (logits, tokens) = lab_run(cfg, &prompt);
    let scale = common::max_abs(&stock.0);
    assert!(scale > 1e-3, "logits must not be trivially zero");
    let d = common::max_abs_diff(&logits, &stock.0);
    assert!(d < 1e-4 * scale.max(1.0), "{:?}: max diff {d} (scale {scale})", cfg.model_type);
    assert_eq!(tokens, stock.1, "{:?}: greedy tokens", cfg.model_type);
}

fn stock_json(cfg: &DecoderConfig) -> serde_json::Value {
    serde_json::to_value(cfg).unwrap()
}

#[test]
fn qwen3_as_candle_transformers() {
    let cfg = DecoderConfig::preset("tiny-qwen3").unwrap();
    assert_ne!(cfg.q_dim(), cfg.hidden_size, "the preset's head_dim is not hidden / heads, as Qwen3-0.6B's");
    let mut j = stock_json(&cfg);
    j["attention_bias"] = false.into();
    j["max_window_layers"] = cfg.num_hidden_layers.into();
    j["use_sliding_window"] = false.into();
    let scfg: qwen3::Config = serde_json::from_value(j).unwrap();
    let vb = VarBuilder::from_tensors(weights(&cfg), DType::F32, &Device::Cpu);
    let mut model = qwen3::ModelForCausalLM::new(&scfg, vb).unwrap();
    same(&cfg, |t, offset| model.forward(t, offset).unwrap());
}

#[test]
fn llama3_as_candle_transformers() {
    let cfg = DecoderConfig::preset("tiny-llama").unwrap();
    assert!(cfg.rope_scaling.is_some(), "the preset scales RoPE as Llama 3.1");
    let lcfg: llama::LlamaConfig = serde_json::from_value(stock_json(&cfg)).unwrap();
    let scfg = lcfg.into_config(false);
    let vb = VarBuilder::from_tensors(weights(&cfg), DType::F32, &Device::Cpu);
    let model = llama::Llama::load(vb, &scfg).unwrap();
    let mut cache = llama::Cache::new(true, DType::F32, &scfg, &Device::Cpu).unwrap();
    same(&cfg, |t, offset| model.forward(t, offset, &mut cache).unwrap());
}

#[test]
fn mistral_as_candle_transformers() {
    let cfg = DecoderConfig::preset("tiny-mistral").unwrap();
    let scfg: mistral::Config = serde_json::from_value(stock_json(&cfg)).unwrap();
    let vb = VarBuilder::from_tensors(weights(&cfg), DType::F32, &Device::Cpu);
    let mut model = mistral::Model::new(&scfg, vb).unwrap();
    same(&cfg, |t, offset| model.forward(t, offset).unwrap());
}

/// Qwen3-MoE's mixture, with the picked experts' weights renormalised (Qwen3-30B-A3B's
/// `norm_topk_prob`) and not: the router, the top-k and each expert's weighted sum as
/// candle-transformers' reference block computes them.
#[test]
fn qwen3_moe_as_candle_transformers() {
    for renormalize in [true, false] {
        let mut cfg = DecoderConfig::preset("tiny-moe").unwrap();
        cfg.norm_topk_prob = Some(renormalize);
        let mut j = stock_json(&cfg);
        j["attention_bias"] = false.into();
        j["max_window_layers"] = cfg.num_hidden_layers.into();
        j["use_sliding_window"] = false.into();
        j["decoder_sparse_step"] = 1.into();
        let scfg: qwen3_moe::Config = serde_json::from_value(j).unwrap();
        let vb = VarBuilder::from_tensors(weights(&cfg), DType::F32, &Device::Cpu);
        let mut model = qwen3_moe::ModelForCausalLM::new(&scfg, vb).unwrap();
        same(&cfg, |t, offset| model.forward(t, offset).unwrap());
    }
}

/// Mixtral's mixture (the experts `w1`, `w3`, `w2` under `block_sparse_moe`, always renormalised)
/// on a small config of its shape.
#[test]
fn mixtral_as_candle_transformers() {
    let mut j = stock_json(&DecoderConfig::preset("tiny-mistral").unwrap());
    j["model_type"] = "mixtral".into();
    j["num_local_experts"] = 4.into();
    j["num_experts_per_tok"] = 2.into();
    j.as_object_mut().unwrap().remove("sliding_window");
    let cfg = DecoderConfig::from_json(&j.to_string(), "tiny mixtral").unwrap();
    assert_eq!(cfg.experts().map(|e| (e.experts, e.active, e.renormalize)), Some((4, 2, true)));
    let mut stock = stock_json(&cfg);
    stock["num_local_experts"] = 4.into();
    stock["sliding_window"] = 1_000_000.into();
    stock["use_flash_attn"] = false.into();
    let scfg: mixtral::Config = serde_json::from_value(stock).unwrap();
    let vb = VarBuilder::from_tensors(weights(&cfg), DType::F32, &Device::Cpu);
    let mut model = mixtral::Model::new(&scfg, vb).unwrap();
    same(&cfg, |t, offset| model.forward(t, offset).unwrap());
}

/// Each family's published config.json alone in a folder, as a user copies it from a model card:
/// `estimate` prices its BF16 weights at 2 B × the published parameter count (each count written
/// by hand from the model card or its safetensors index).
#[test]
fn estimate_prices_a_folder_holding_only_config_json() {
    for (preset, published) in [
        ("qwen3-8b", 8_190_735_360u64),
        ("llama-2-7b", 6_738_415_616),
        ("llama-3.1-8b", 8_030_261_248),
        ("mistral-7b", 7_248_023_552),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("mixtral-8x7b", 46_702_792_704),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        let json = std::fs::read(format!("{}/data/models/{preset}.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
        std::fs::write(model.join("config.json"), json).unwrap();
        let out = dir.path().join("out");
        let o = common::lab_quiet(&[
            "estimate",
            "--device",
            "cpu",
            "--model",
            model.to_str().unwrap(),
            "--precisions",
            "bf16",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{preset}: {}", common::output_text(&o));
        let df = common::read_csv(&out.join("estimate/estimate_ledger.csv"));
        let items = df.column("item").unwrap().str().unwrap().clone();
        let mib = df.column("mib").unwrap().f64().unwrap().clone();
        let weights = items.iter().zip(mib.iter()).find(|(i, _)| *i == Some("weights")).and_then(|(_, m)| m).unwrap();
        assert_eq!(weights * (1u64 << 20) as f64, (2 * published) as f64, "{preset}");
    }
}

/// Mistral v0.1's sliding window: up to the window the lab's full attention is the window's; a
/// cache past it would compute another model, and is refused in a line naming the window.
#[test]
fn a_cache_past_mistrals_window_is_refused() {
    let mut cfg = DecoderConfig::preset("tiny-mistral").unwrap();
    cfg.sliding_window = Some(32);
    let w = weights(&cfg).into_iter().map(|(k, v)| (k, Weight::Dense(v))).collect();
    let model = Decoder::new(&cfg, Precision::F32, w, &Device::Cpu).unwrap();
    assert!(model.new_cache(1, 32).is_ok());
    let err = match model.new_cache(1, 33) {
        Ok(_) => panic!("33 tokens is past a window of 32"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("sliding window of 32"), "{err}");
}

/// A Qwen3 GGUF the lab writes reads back as the same model (family, head size, every tensor
/// exactly in F32, the q/k norms included); a Llama 3.1 one is refused in a line, since llama.cpp
/// carries its scaled RoPE as a tensor the lab does not write.
#[test]
fn a_qwen3_gguf_round_trips_and_a_scaled_llama_one_is_refused() {
    use vram_lab::model::gguf::Gguf;
    use vram_lab::model::load::weights::WeightSource;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("q3.gguf");
    let quantize = |preset: &str, to: &std::path::Path| {
        common::lab_quiet(&[
            "quantize",
            "--model",
            &format!("synthetic:{preset}"),
            "--type",
            "f32",
            "--to",
            to.to_str().unwrap(),
        ])
    };
    let o = quantize("tiny-qwen3", &path);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let want = DecoderConfig::preset("tiny-qwen3").unwrap();
    let (mut g, truncated) = Gguf::open_header(&path).unwrap();
    assert!(truncated.is_none());
    let got = g.config().unwrap();
    assert_eq!(
        (got.model_type, got.head_dim(), got.q_dim(), got.param_count()),
        (want.model_type, want.head_dim(), want.q_dim(), want.param_count())
    );
    let values = common::tensors(&want, 42); // the CLI's default seed
    for spec in want.tensor_specs() {
        let t = g.load(&spec, Precision::F32, &Device::Cpu).unwrap().dense().unwrap();
        assert_eq!(common::max_abs_diff(&t, &values[&spec.name]), 0.0, "{}", spec.name);
    }
    // tiny-llama scales its RoPE as Llama 3.1 does: llama.cpp carries that as a tensor the lab
    // does not write.
    let o = quantize("tiny-llama", &tmp.path().join("l.gguf"));
    assert!(!o.status.success());
    assert!(common::output_text(&o).contains("with rope_scaling"), "{}", common::output_text(&o));
}

/// A Llama GGUF as llama.cpp's converter lays it out: in the file (read by candle's own GGUF
/// reader) q's and k's rows are in llama.cpp's RoPE order; loaded by the lab they are the
/// checkpoint's again, in F32 and in Q8_0 (whole quantized rows move), and the F32 file computes
/// the checkpoint's logits.
#[test]
fn a_llama_gguf_holds_q_and_k_in_llamacpp_order() {
    use candle_core::quantized::gguf_file;
    use vram_lab::model::gguf::recipe::FileType;
    use vram_lab::model::gguf::{permute, writer, Gguf};
    use vram_lab::model::load::synthetic::Synthetic;
    use vram_lab::model::load::weights::{load_all, WeightSource};
    let mut j = stock_json(&DecoderConfig::preset("tiny-llama").unwrap());
    j.as_object_mut().unwrap().remove("rope_scaling");
    let cfg = DecoderConfig::from_json(&j.to_string(), "tiny llama").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cpu = Device::Cpu;
    let logits = |source: &mut dyn WeightSource| {
        let w = load_all(&cfg, source, Precision::F32, &cpu, None, |_, _| Ok(())).unwrap();
        let model = Decoder::new(&cfg, Precision::F32, w, &cpu).unwrap();
        let mut cache = model.new_cache(1, 16).unwrap();
        let ids = Tensor::new(common::ids(5, cfg.vocab_size, 9).as_slice(), &cpu).unwrap().unsqueeze(0).unwrap();
        last_logits(&model.forward(&ids, &mut cache, Logits::Last).unwrap()).unwrap()
    };
    for (ty, name) in [(FileType::F32, "f32.gguf"), (FileType::Q8_0, "q8.gguf")] {
        let path = tmp.path().join(name);
        let mut synthetic = Synthetic::new(cfg.clone(), 42);
        writer::write_gguf(&cfg, &mut synthetic, &path, writer::FileTypes::Llama(ty), None, |_| {}).unwrap();
        let mut g = Gguf::open(&path).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        for (hf, ggml, heads) in [
            ("model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", cfg.num_attention_heads),
            ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", cfg.num_key_value_heads),
        ] {
            let in_file = content.tensor(&mut file, ggml, &cpu).unwrap().dequantize(&cpu).unwrap();
            let spec = cfg.tensor_specs().into_iter().find(|s| s.name == hf).unwrap();
            let loaded = g.load(&spec, Precision::F32, &cpu).unwrap().dense().unwrap();
            let order: Vec<u32> =
                permute::file_to_checkpoint(spec.shape[0], heads).unwrap().iter().map(|&r| r as u32).collect();
            let reordered = loaded.index_select(&Tensor::new(order.as_slice(), &cpu).unwrap(), 0).unwrap();
            assert_eq!(common::max_abs_diff(&in_file, &reordered), 0.0, "{name} {ggml}");
            assert!(common::max_abs_diff(&in_file, &loaded) > 0.0, "{name} {ggml}: the file's rows are permuted");
        }
        if ty == FileType::F32 {
            let (ours, theirs) = (logits(&mut g), logits(&mut synthetic));
            assert!(common::max_abs_diff(&ours, &theirs) < 1e-5 * common::max_abs(&theirs).max(1.0));
        }
    }
}
