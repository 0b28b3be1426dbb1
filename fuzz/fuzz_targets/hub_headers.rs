//! The headers the Hub sizing reads by Range requests, as `estimate --model org/x:file` prices
//! them: the first byte picks a GGUF prefix (the next 8 bytes the file length the server gave)
//! or a safetensors header's JSON. Errors are fine; a panic (an overflowing size), an abort or an
//! allocation the size of a forged count is the bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use vram_lab::model::gguf::{header::Header, Gguf};
use vram_lab::model::load::hub::headers::parse_safetensors_header;
use vram_lab::model::Precision;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    if kind % 2 == 0 {
        let Some((len, prefix)) = rest.split_first_chunk::<8>() else { return };
        if let Ok(Some(h)) = Header::from_prefix(prefix, u64::from_le_bytes(*len), Path::new("m.gguf")) {
            let _ = (h.tensor_bytes(), h.bytes_by_type());
            if let Ok(g) = Gguf::from_header(h) {
                if let Ok(cfg) = g.config() {
                    let _ = (g.loaded_bytes(&cfg, Precision::Q4), g.loaded_bytes(&cfg, Precision::F32));
                }
            }
        }
    } else if let Ok(h) = parse_safetensors_header("m.safetensors", rest) {
        let _ = h.params();
    }
});
