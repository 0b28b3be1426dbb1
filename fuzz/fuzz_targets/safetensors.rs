//! A model directory as `--model DIR` reads it: a one-layer model's config.json (hidden 32,
//! vocabulary 64: its safetensors seed is 55 KB, so mutations reach every tensor) beside a
//! model.safetensors made of the fuzzer's bytes.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use vram_lab::model::ModelSource;

/// The config of fuzz/seeds/safetensors/micro.safetensors.
const MICRO: &str = r#"{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 128, "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "float32"}"#;

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch().join("m");
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), MICRO).unwrap();
    }
    std::fs::write(dir.join("model.safetensors"), data).unwrap();
    common::open_and_load(&ModelSource::Dir(dir));
});
