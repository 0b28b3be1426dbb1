//! Figures of the report and of the reference runs the lab stands beside (PyTorch and stock candle re-run on an H200), in GiB as the
//! report's code prints them (bytes / 1024³, labelled "GB").

/// The report, RTX 4090 24 GB, PyTorch + transformers, Qwen2.5-7B-Instruct.
pub mod report {
    /// (allocated, reserved, peak) after loading.
    pub const BF16_LOADED: (f64, f64, f64) = (14.19, 14.21, 14.19);
    /// (allocated, reserved, peak) after generating 200 tokens.
    pub const BF16_AFTER_GENERATE: (f64, f64, f64) = (14.20, 14.26, 14.23);
    /// bitsandbytes NF4 (`load_in_4bit=True`).
    pub const INT4_LOADED: (f64, f64, f64) = (5.46, 6.71, 6.59);
    pub const INT4_AFTER_GENERATE: (f64, f64, f64) = (5.46, 6.72, 6.59);
    /// FP32: "Tried to allocate 2.03 GiB", 22.30 GiB in use by the process.
    pub const FP32_OOM_REQUEST_GIB: f64 = 2.03;
    pub const FP32_OOM_IN_USE_GIB: f64 = 22.30;
    /// Full-GPU BF16 decode speed (stage 4).
    pub const BF16_DECODE_TOK_S: f64 = 38.23;
    /// Stage 2 ("KV Cache 增量"), MB per added 1,024 tokens from 1k to 2k (its MB are MiB).
    pub const KV_GROWTH_PER_1K_MIB: f64 = 352.50;
    /// Stage 2: the first sequence length that ran out of memory (batch 1, all logits kept).
    pub const KV_FIRST_OOM_SEQ: f64 = 16384.0;
    /// Stage 3 (fragmentation), (allocated, reserved) after ten 500 MB blocks, after freeing the
    /// odd ones, and reserved after asking for 2 GB (its allocated was not printed).
    pub const FRAG_TEN_BLOCKS: (f64, f64) = (4.88, 4.88);
    pub const FRAG_ODD_FREED: (f64, f64) = (2.93, 4.88);
    pub const FRAG_AFTER_REQUEST_RESERVED: f64 = 6.88;
    /// Stage 4: accelerate's `device_map="auto"` with `max_memory={0: "5GiB"}`, 50 tokens.
    pub const OFFLOAD_5GIB_TOK_S: f64 = 0.61;
}

/// The related article on CUDA unified memory: Qwen3-14B (27 GB in BF16) on an RTX 4090 24 GB,
/// (GPU memory in MB, tok/s) per mode.
pub mod unified_article {
    pub const MANAGED: (f64, f64) = (20584.0, 1.75);
    pub const PREFER_CPU: (f64, f64) = (744.0, 0.90);
    pub const READ_MOSTLY: (f64, f64) = (20622.0, 1.77);
}

/// llama.cpp (llama-bench, BF16 GGUF of Qwen2.5-7B's shapes) on an H200 with 16 host cores,
/// `-ngl 10`: 10 layers on the GPU (4.9 GiB of weights), the rest computed on the CPU. The
/// offload stage's best mode is set beside it.
pub const LLAMACPP_H200_NGL10_TOK_S: f64 = 14.1;

/// The same experiments re-run with PyTorch on an H200 (transformers 5.17, synthetic weights).
pub mod pytorch_h200 {
    pub const BF16_LOADED: (f64, f64, f64) = (14.227, 14.354, 14.227);
    pub const BF16_AFTER_GENERATE: (f64, f64, f64) = (14.259, 14.432, 14.291);
    pub const BF16_GENERATE_TOK_S: f64 = 22.59;
    pub const FP32_UNCAPPED_LOADED: (f64, f64, f64) = (28.541, 28.707, 28.541);
}

/// Stock candle-transformers 0.11.1 on an H200, synthetic Qwen2.5-7B: what the lab must beat.
pub mod candle_h200 {
    pub const BF16_DECODE_TOK_S: f64 = 114.80;
    pub const Q4K_DECODE_TOK_S: f64 = 140.06;
    /// Q4_K weights in the pool, MiB (the embedding expanded to F32).
    pub const Q4K_WEIGHTS_MIB: f64 = 5889.1;
}

/// llama.cpp (0c1e57098, CUDA 13.0) on an H200, synthetic Qwen2.5-7B GGUF, `llama-bench -p 160
/// -n 200 -r 3` with flash attention: the stack the lab's speed stands beside.
pub mod llamacpp_h200 {
    pub const BF16_DECODE_TOK_S: f64 = 198.74;
    pub const Q4KM_DECODE_TOK_S: f64 = 286.08;
    pub const BF16_PREFILL_160_TOK_S: f64 = 16526.53;
}

/// Whether `cfg` is the report's model (Qwen2.5-7B's shapes): only then do its figures apply.
pub fn is_report_model(cfg: &crate::model::DecoderConfig) -> bool {
    crate::model::DecoderConfig::preset("qwen2.5-7b")
        .map(|r| {
            r.param_count() == cfg.param_count()
                && r.hidden_size == cfg.hidden_size
                && r.num_hidden_layers == cfg.num_hidden_layers
        })
        .unwrap_or(false)
}

/// The prompt of the report's stage 1.
pub const REPORT_PROMPT: &str = "显存管理是高性能计算的核心,";
pub const REPORT_PROMPT_REPEAT: usize = 20;
/// Tokens Qwen2.5's tokenizer makes of that prompt (160, as the candle reference run counted);
/// used as the random-id prompt length when no tokenizer is at hand.
pub const REPORT_PROMPT_TOKENS: usize = 160;

/// Records of the PyTorch reference script (`scripts/reference/pytorch_reference.py`), one JSON
/// object per line, run on the same GPU in the same call as the lab: those with `"experiment"`
/// equal to `experiment`.
pub fn pytorch_records(path: &std::path::Path, experiment: &str) -> crate::Result<Vec<serde_json::Value>> {
    // The reference script writes a few hundred lines; a larger file is not its output.
    let text = crate::paths::read_regular_text(path, 64 << 20)
        .map_err(|e| crate::LabError::input(format!("cannot read PyTorch figures ({e})")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| crate::LabError::input(format!("{} line {}: not JSON ({e})", path.display(), i + 1)))?;
        if v["experiment"] == experiment {
            out.push(v);
        }
    }
    Ok(out)
}

/// One test of llama.cpp's `llama-bench -o jsonl` run on the same GPU in the same call
/// (`scripts/reference/llama_bench.sh`): the precision is the model file's name, as that script
/// writes the lab's GGUF files (`q4_k_m.gguf`, `bf16.gguf`).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaBench {
    pub precision: Option<crate::model::Precision>,
    pub n_prompt: u64,
    pub n_gen: u64,
    pub n_gpu_layers: u64,
    pub tok_s: f64,
    /// The build and the options, as a label: "llama.cpp <commit> (-ngl N, -fa F)".
    pub label: String,
}

/// The records of llama-bench's JSON lines at `path`; a line that is not a test record (no
/// `avg_ts`) is skipped, a line that is not JSON is an error naming the file and line.
pub fn llamacpp_records(path: &std::path::Path) -> crate::Result<Vec<LlamaBench>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::LabError::input(format!("cannot read llama-bench figures {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| l.trim_start().starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| crate::LabError::input(format!("{} line {}: not JSON ({e})", path.display(), i + 1)))?;
        let Some(tok_s) = v["avg_ts"].as_f64() else { continue };
        let file = v["model_filename"].as_str().unwrap_or("");
        let stem = std::path::Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let num = |k: &str| v[k].as_u64().or_else(|| v[k].as_i64().map(|n| n.max(0) as u64)).unwrap_or(0);
        let commit = v["build_commit"].as_str().unwrap_or("?");
        let fa = v["flash_attn"]
            .as_i64()
            .map(|f| f.to_string())
            .or_else(|| v["flash_attn"].as_bool().map(|b| u8::from(b).to_string()))
            .unwrap_or_else(|| "?".into());
        out.push(LlamaBench {
            precision: crate::model::Precision::parse(stem).ok(),
            n_prompt: num("n_prompt"),
            n_gen: num("n_gen"),
            n_gpu_layers: num("n_gpu_layers"),
            tok_s,
            label: format!("llama.cpp {commit} (-ngl {}, -fa {fa})", num("n_gpu_layers")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lines as llama-bench 0c1e570 writes them (fields trimmed), a log line and a line of
    /// another kind: the tests are read with their precision from the file's name.
    #[test]
    fn llama_bench_lines_are_read() {
        let dir = std::env::temp_dir().join(format!("vram-lab-llb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("q4.jsonl");
        std::fs::write(
            &p,
            concat!(
                "ggml_cuda_init: found 1 CUDA devices\n",
                r#"{"build_commit": "0c1e570", "model_filename": "/tmp/w/q4_k_m.gguf", "n_prompt": 512, "n_gen": 0, "n_gpu_layers": 99, "flash_attn": 1, "avg_ts": 9876.5}"#,
                "\n",
                r#"{"build_commit": "0c1e570", "model_filename": "/tmp/w/q4_k_m.gguf", "n_prompt": 0, "n_gen": 128, "n_gpu_layers": 99, "flash_attn": 1, "avg_ts": 290.25}"#,
                "\n",
                r#"{"note": "not a test"}"#,
                "\n"
            ),
        )
        .unwrap();
        let r = llamacpp_records(&p).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].precision, Some(crate::model::Precision::Q4KM));
        assert_eq!((r[1].n_prompt, r[1].n_gen, r[1].n_gpu_layers), (0, 128, 99));
        assert_eq!(r[1].tok_s, 290.25);
        assert_eq!(r[0].label, "llama.cpp 0c1e570 (-ngl 99, -fa 1)");
        std::fs::write(&p, "{not json\n").unwrap();
        assert!(llamacpp_records(&p).unwrap_err().to_string().contains("line 1"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
