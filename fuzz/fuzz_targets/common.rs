//! What every target does with its bytes: write them where the lab reads a user's file, open the
//! model as `vram-lab` does and load every tensor on the CPU. Errors are fine; a panic, an abort
//! or an allocation the size of a forged length field is the bug.

use candle_core::Device;
use std::path::PathBuf;
use vram_lab::model::source::{self, SourceOptions};
use vram_lab::model::{ModelSource, Precision};

/// A scratch folder per fuzzing process (in memory where /dev/shm exists).
pub fn scratch() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = base.join(format!("vram-lab-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[allow(dead_code)]
pub fn open_and_load(source: &ModelSource) {
    if let Ok(mut opened) = source::open(source, &SourceOptions::default()) {
        for spec in opened.cfg.tensor_specs() {
            if opened.weights.load(&spec, Precision::F32, &Device::Cpu).is_err() {
                return;
            }
        }
    }
}
