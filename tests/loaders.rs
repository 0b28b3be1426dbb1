//! Files the tests write (safetensors, sharded safetensors, GGUF) load back and give the logits of
//! the in-memory model; quantize → load Q4 round trip; presets carry the real names and shapes.

mod common;

use candle_core::{DType, Device, Tensor};
use vram_lab::memory::MemoryProbe;
use vram_lab::model::decoder::last_logits;
use vram_lab::model::gguf::writer::{self, FileTypes};
use vram_lab::model::load::weights::Weight;
use vram_lab::model::source;
use vram_lab::model::{Decoder, DecoderConfig, Logits, ModelSource, Precision, SourceOptions};

const SEED: u64 = 11;

fn load(src: &ModelSource, p: Precision) -> Decoder {
    let probe = MemoryProbe::new(&Device::Cpu);
    source::load(src, &SourceOptions { seed: SEED, ..Default::default() }, p, &Device::Cpu, &probe, None).unwrap().model
}

fn logits(model: &Decoder, ids: &[u32]) -> Tensor {
    let mut cache = model.new_cache(1, ids.len()).unwrap();
    let t = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    last_logits(&model.forward(&t, &mut cache, Logits::Last).unwrap()).unwrap()
}

fn in_memory(cfg: &DecoderConfig) -> Decoder {
    let w = common::tensors(cfg, SEED).into_iter().map(|(k, v)| (k, Weight::Dense(v))).collect();
    Decoder::new(cfg, Precision::F32, w, &Device::Cpu).unwrap()
}

#[test]
fn safetensors_single_and_sharded_give_the_same_logits() {
    let cfg = common::tiny();
    let ids = common::ids(17, cfg.vocab_size, 1);
    let reference = logits(&in_memory(&cfg), &ids);
    let tmp = tempfile::tempdir().unwrap();
    for shards in [1, 3] {
        let dir = tmp.path().join(format!("m{shards}"));
        common::write_dir(&dir, &cfg, SEED, DType::F32, shards);
        assert_eq!(dir.join("model.safetensors.index.json").is_file(), shards > 1);
        let got = logits(&load(&ModelSource::parse(dir.to_str().unwrap()).unwrap(), Precision::F32), &ids);
        assert!(common::max_abs_diff(&got, &reference) < 1e-6, "{shards} shards");
    }
    // A BF16 checkpoint (as Qwen ships) loaded in F32: within BF16 rounding of the weights.
    let dir = tmp.path().join("bf16");
    common::write_dir(&dir, &cfg, SEED, DType::BF16, 1);
    let got = logits(&load(&ModelSource::parse(dir.to_str().unwrap()).unwrap(), Precision::F32), &ids);
    let rel = common::max_abs_diff(&got, &reference) / common::max_abs(&reference);
    assert!(rel > 0.0 && rel < 0.05, "bf16 checkpoint relative error {rel}");
}

#[test]
fn quantize_then_load_q4_round_trip() {
    let cfg = common::tiny();
    let ids = common::ids(17, cfg.vocab_size, 2);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    common::write_dir(&dir, &cfg, SEED, DType::F32, 1);
    let dir_src = ModelSource::parse(dir.to_str().unwrap()).unwrap();

    // quantize: safetensors → GGUF, with the Q4 plan per tensor.
    let gguf = tmp.path().join("m-q4.gguf");
    let mut opened = source::open(&dir_src, &SourceOptions::default()).unwrap();
    let rows = writer::write_gguf(&opened.cfg, opened.weights.as_mut(), &gguf, FileTypes::LabQ4, None, |_| {}).unwrap();
    assert!(rows.iter().any(|r| r.ty.name == "Q4_K") && rows.iter().any(|r| r.ty.name == "Q6_K"));
    let gguf_src = ModelSource::parse(gguf.to_str().unwrap()).unwrap();

    let q4_from_gguf = load(&gguf_src, Precision::Q4);
    // The config read back from GGUF metadata is the one written.
    assert_eq!(q4_from_gguf.cfg.num_key_value_heads, cfg.num_key_value_heads);
    assert_eq!(q4_from_gguf.cfg.vocab_size, cfg.vocab_size);
    assert_eq!(q4_from_gguf.weight_bytes(), vram_lab::estimate::weight_bytes(&cfg, Precision::Q4));

    // Quantizing on load from safetensors is the same quantizer: identical logits.
    let q4_on_load = load(&dir_src, Precision::Q4);
    let a = logits(&q4_from_gguf, &ids);
    let b = logits(&q4_on_load, &ids);
    assert!(common::max_abs_diff(&a, &b) < 1e-5);

    // Against F32: Q4 rounding moves logits a little, not a lot.
    let f32_logits = logits(&in_memory(&cfg), &ids);
    let rel = common::max_abs_diff(&a, &f32_logits) / common::max_abs(&f32_logits);
    assert!(rel > 0.0 && rel < 0.25, "q4 relative error {rel}");

    // The GGUF dequantized to F32 computes the same function as Q4 blocks.
    let deq = logits(&load(&gguf_src, Precision::F32), &ids);
    let rel = common::max_abs_diff(&deq, &a) / common::max_abs(&a);
    assert!(rel < 0.02, "dequantized vs quantized matmul {rel}");

    // candle-transformers' quantized Qwen2 on the same file agrees.
    let mut f = std::fs::File::open(&gguf).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut stock =
        candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
    let t = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let s = stock.forward(&t, 0).unwrap().flatten_all().unwrap();
    let rel = common::max_abs_diff(&s, &a) / common::max_abs(&a);
    assert!(rel < 0.02, "lab q4 vs candle quantized_qwen2: {rel}");
}

#[test]
fn synthetic_q4_weights_match_the_plan() {
    let cfg = common::tiny();
    let m = load(&ModelSource::parse("synthetic:tiny").unwrap(), Precision::Q4);
    assert_eq!(m.weight_bytes(), vram_lab::estimate::weight_bytes(&cfg, Precision::Q4));
    let out = logits(&m, &common::ids(9, cfg.vocab_size, 3));
    assert!(common::max_abs(&out) > 0.0);
}

#[test]
fn presets_carry_real_names_shapes_and_totals() {
    // Published parameter totals of the Qwen2.5 checkpoints.
    let totals = [
        ("qwen2.5-0.5b", 494_032_768usize),
        ("qwen2.5-1.5b", 1_543_714_304),
        ("qwen2.5-3b", 3_085_938_688),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen2.5-14b", 14_770_033_664),
        ("qwen2.5-32b", 32_763_876_352),
        ("qwen2.5-72b", 72_706_203_648),
    ];
    for (name, total) in totals {
        let cfg = DecoderConfig::preset(name).unwrap();
        assert_eq!(cfg.param_count(), total, "{name}");
        let specs = cfg.tensor_specs();
        assert_eq!(specs.iter().any(|s| s.name == "lm_head.weight"), !cfg.tie_word_embeddings, "{name}");
        assert_eq!(specs.len(), 2 + 12 * cfg.num_hidden_layers + usize::from(!cfg.tie_word_embeddings));
    }
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let specs = cfg.tensor_specs();
    let shape = |n: &str| specs.iter().find(|s| s.name == n).unwrap().shape.clone();
    assert_eq!(shape("model.embed_tokens.weight"), vec![152064, 3584]);
    assert_eq!(shape("model.layers.0.self_attn.k_proj.weight"), vec![512, 3584]);
    assert_eq!(shape("model.layers.0.self_attn.k_proj.bias"), vec![512]);
    assert_eq!(shape("model.layers.27.mlp.down_proj.weight"), vec![3584, 18944]);
    // Synthetic tensors come out with those shapes.
    let mut src = vram_lab::model::load::synthetic::Synthetic::new(cfg.clone(), 1);
    use vram_lab::model::load::weights::WeightSource;
    let spec = specs.iter().find(|s| s.name == "model.layers.3.self_attn.k_proj.bias").unwrap();
    let t = src.load(spec, Precision::Bf16, &Device::Cpu).unwrap().dense().unwrap();
    assert_eq!(t.dims(), &[512]);
    assert_eq!(t.dtype(), DType::BF16);
}

#[test]
fn hub_settings_honour_env_and_cache_dir() {
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY (edition 2021): this test alone touches these variables.
    std::env::set_var("HF_ENDPOINT", "http://127.0.0.1:9");
    let s = vram_lab::model::load::hub::HubSettings::from_env(Some(tmp.path()));
    assert_eq!(s.endpoint, "http://127.0.0.1:9");
    assert_eq!(s.cache_dir, tmp.path());
    std::env::set_var("HF_HOME", tmp.path().join("hfhome"));
    let s = vram_lab::model::load::hub::HubSettings::from_env(None);
    assert_eq!(s.cache_dir, tmp.path().join("hfhome").join("hub"));
    // Fetching from a closed port fails with a message naming the endpoint and the cache.
    let opts = SourceOptions { cache_dir: Some(tmp.path().to_path_buf()), ..Default::default() };
    let err = source::open(&ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct").unwrap(), &opts).err().expect("must fail");
    let msg = err.to_string();
    assert!(msg.contains("127.0.0.1:9") && msg.contains(tmp.path().to_str().unwrap()), "{msg}");
}

/// Column `c` of a CSV row set as strings (nulls empty).
fn column(df: &polars::prelude::DataFrame, c: &str) -> Vec<String> {
    df.column(c).unwrap().as_materialized_series().iter().map(|v| v.to_string().trim_matches('"').to_string()).collect()
}

#[test]
fn load_stage_times_a_written_checkpoint_and_a_real_one_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let out = tmp.path().join("run");
    let o = common::lab_quiet(&["load", "--dir", disk.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    // The checkpoint written on the disk measured is gone after the stage.
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0);
    let d = common::read_csv(&out.join("load/load_disk.csv"));
    let ops: Vec<String> =
        column(&d, "checkpoint").iter().zip(column(&d, "op")).map(|(c, o)| format!("{c}: {o}")).collect();
    assert_eq!(
        ops,
        [
            "safetensors bf16: write (synced)",
            "safetensors bf16: read cold",
            "safetensors bf16: read warm",
            "gguf q4_k_m: quantize + write (synced)",
            "gguf q4_k_m: read cold",
            "gguf q4_k_m: read warm"
        ]
    );
    // Every read returns the bytes written.
    let mib: Vec<f64> = column(&d, "file_mib").iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(mib[0], mib[1]);
    assert_eq!(mib[1], mib[2]);
    assert_eq!(mib[3], mib[4]);
    let cfg = DecoderConfig::preset("tiny").unwrap();
    let bf16 = vram_lab::estimate::weight_bytes(&cfg, Precision::Bf16) as f64 / (1 << 20) as f64;
    // The safetensors files hold the BF16 weights and a header of a few KiB.
    assert!(mib[0] >= bf16 && mib[0] < bf16 + 0.1, "{} MiB on disk for {bf16} MiB of weights", mib[0]);
    let t = common::read_csv(&out.join("load/load_time.csv"));
    let loads: Vec<String> = column(&t, "checkpoint")
        .iter()
        .zip(column(&t, "precision"))
        .zip(column(&t, "cache"))
        .map(|((c, p), k)| format!("{c} {p} {k}"))
        .collect();
    assert_eq!(
        loads,
        [
            "safetensors bf16 bf16 cold",
            "safetensors bf16 bf16 warm",
            "safetensors bf16 q4_k_m cold",
            "safetensors bf16 q4_k_m warm",
            "gguf q4_k_m q4_k_m cold",
            "gguf q4_k_m q4_k_m warm"
        ]
    );
    assert!(column(&t, "outcome").iter().all(|o| o == "ok"));
    let q4 = vram_lab::estimate::weight_bytes(&cfg, Precision::Q4KM) as f64 / (1 << 20) as f64;
    let device: Vec<f64> = column(&t, "device_mib").iter().map(|v| v.parse().unwrap()).collect();
    // The CSV keeps six decimals.
    for (got, want) in device.iter().zip([bf16, bf16, q4, q4, q4, q4]) {
        assert!((got - want).abs() < 1e-5, "{device:?}");
    }

    // A real directory is measured where it is: no write, nothing removed.
    let dir = tmp.path().join("model");
    common::write_dir(&dir, &cfg, SEED, DType::BF16, 2);
    let before = std::fs::read_dir(&dir).unwrap().count();
    let out2 = tmp.path().join("run2");
    let o = common::lab_quiet(&[
        "load",
        "--model",
        dir.to_str().unwrap(),
        "--precisions",
        "bf16",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), before);
    let d = common::read_csv(&out2.join("load/load_disk.csv"));
    assert_eq!(column(&d, "op"), ["read cold", "read warm"]);
    let t = common::read_csv(&out2.join("load/load_time.csv"));
    assert_eq!(column(&t, "cache"), ["cold", "warm"]);
}
