//! A tiny Qwen2 that HF transformers saved (config.json + model.safetensors + tokenizer.json,
//! written by scripts/make_hf_fixture.py): the lab's loader, tokenizer and F32 forward pass give
//! the same greedy tokens transformers generated from it (recorded in expected.json).

use candle_core::Device;
use std::path::Path;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::source;
use vram_lab::model::{self, GenerateConfig, ModelSource, Precision, SourceOptions};

#[test]
fn greedy_tokens_match_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let ids =
        |k: &str| -> Vec<u32> { expected[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect() };

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
        let got = model::decoder::last_logits(&lm.model.forward(&t, &mut cache, model::Logits::Last).unwrap()).unwrap();
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

/// An instruct model's chat template: with Qwen2.5's ChatML template in tokenizer_config.json,
/// `generate --prompt` encodes the prompt inside it (default system message, user turn, the
/// assistant's opening); `--raw` encodes the text alone.
#[test]
fn generate_applies_the_chatml_template_unless_raw() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2");
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(f), tmp.path().join(f)).unwrap();
    }
    let template = "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}";
    std::fs::write(
        tmp.path().join("tokenizer_config.json"),
        serde_json::json!({ "chat_template": template }).to_string(),
    )
    .unwrap();
    let tok = tokenizers::Tokenizer::from_file(fixture.join("tokenizer.json")).unwrap();
    let encode = |s: &str| -> Vec<u64> { tok.encode(s, false).unwrap().get_ids().iter().map(|&i| i as u64).collect() };
    let run = |extra: &[&str]| -> serde_json::Value {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vram-lab"))
            .args([
                "generate",
                "--model",
                tmp.path().to_str().unwrap(),
                "--precision",
                "f32",
                "--prompt",
                "hello",
                "--max-new-tokens",
                "1",
                "--json",
                "--quiet",
                "--device",
                "cpu",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        v["prompt_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
    };
    let chat = run(&[]);
    assert_eq!(chat["chat_template"], true);
    let want = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(ids(&chat), encode(want));
    let raw = run(&["--raw"]);
    assert_eq!(raw["chat_template"], false);
    assert_eq!(ids(&raw), encode("hello"));
}
