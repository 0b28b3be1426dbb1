//! A model directory as `--model DIR` reads it: the tiny preset's config.json beside a
//! model.safetensors made of the fuzzer's bytes.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use vram_lab::model::{ModelSource, Qwen2Config};

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch().join("m");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = Qwen2Config::preset("tiny").unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string(&cfg).unwrap()).unwrap();
    std::fs::write(dir.join("model.safetensors"), data).unwrap();
    common::open_and_load(&ModelSource::Dir(dir));
});
