//! A config.json as `estimate --config` reads it, then priced: any config the lab accepts must
//! price (or be refused as too large) without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_lab::estimate::fit::{self, Inference};
use vram_lab::model::{AttentionMode, Logits, Precision, DecoderConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cfg) = DecoderConfig::from_json(text, "fuzz") else { return };
    for precision in [Precision::F32, Precision::Bf16, Precision::Q4] {
        let w = Inference { precision, seq: 4096, batch: 1, logits: Logits::Last, attention: AttentionMode::default(), stored: None, allocator: Default::default() };
        if fit::check(&cfg, &w).is_ok() {
            let _ = fit::on_card(&cfg, &w, 0, 24 << 30, Some(1008.0));
        }
    }
});
