//! A tiny Qwen2 that HF transformers saved (config.json + model.safetensors + tokenizer.json,
//! written by scripts/make_hf_fixture.py): the lab's loader, tokenizer and F32 forward pass give
//! the same greedy tokens transformers generated from it (recorded in expected.json).

use candle_core::Device;
use std::path::Path;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::{self, source, GenerateConfig, ModelSource, Precision, SourceOptions};

#[test]
fn greedy_tokens_match_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let ids = |k: &str| -> Vec<u32> { expected[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect() };

    let src = ModelSource::parse(dir.to_str().unwrap()).unwrap();
    let probe = MemoryProbe::new(&Device::Cpu);
    let lm = source::load(&src, &SourceOptions::default(), Precision::F32, &Device::Cpu, &probe, None).unwrap();
    let tok = lm.tokenizer.as_ref().expect("tokenizer.json beside the weights");
    let prompt = tok.encode(expected["prompt"].as_str().unwrap(), false).unwrap().get_ids().to_vec();
    assert_eq!(prompt, ids("prompt_ids"), "tokenizer ids differ from transformers'");

    // The prompt's last-position logits, where the fixture records them.
    if let Some(want) = expected["last_logits_cpu"].as_array() {
        let want: Vec<f32> = want.iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let mut cache = lm.model.new_cache(1, prompt.len()).unwrap();
        let t = candle_core::Tensor::new(prompt.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let got = model::qwen2::last_logits(&lm.model.forward(&t, &mut cache, model::Logits::Last).unwrap()).unwrap();
        let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
        let max_diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert_eq!(got.len(), want.len());
        assert!(max_diff < 1e-4, "logits differ from transformers' by {max_diff}");
    }

    let want = ids("generated_ids_cpu");
    let cfg = GenerateConfig { max_new_tokens: want.len(), ..Default::default() };
    let got = model::generate(&lm.model, &prompt, &cfg).unwrap().generated_ids;
    assert_eq!(got, want);
    // transformers on CUDA generated the same tokens.
    assert_eq!(ids("generated_ids_cuda"), want);
}
