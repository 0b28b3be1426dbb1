//! A GGUF file as `--model x.gguf` reads it: header, metadata, tensor infos, tensors.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use vram_lab::model::ModelSource;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch().join("m.gguf");
    std::fs::write(&path, data).unwrap();
    common::open_and_load(&ModelSource::Gguf(path));
});
