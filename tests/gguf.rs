//! GGUF as a format: ggml's types priced from a header alone, llama.cpp's recipes tensor by
//! tensor, files the lab writes read back (types, offsets, values), types the lab prices but does
//! not compute, and the tokenizer a file carries.

mod common;

use candle_core::{DType, Device};
use std::path::Path;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::gguf::header::Header;
use vram_lab::model::gguf::recipe::FileType;
use vram_lab::model::gguf::types::GgmlType;
use vram_lab::model::gguf::writer::{self, FileTypes, Planned};
use vram_lab::model::gguf::Gguf;
use vram_lab::model::load::gguf_tokenizer as tokenizer;
use vram_lab::model::source;
use vram_lab::model::{self, DecoderConfig, GenerateConfig, ModelSource, Precision, SourceOptions};

/// Qwen2.5-7B under llama.cpp's Q4_K_M, by hand. Matrices: token_embd 152,064 × 3,584 in Q4_K
/// (144 B per 256 values) = 306,561,024 B; output in Q6_K (210 B per 256) = 447,068,160 B; per
/// layer q and o 7,225,344 B each, k and v 1,032,192 B, gate, up and down 38,191,104 B each in
/// Q4_K; use_more_bits picks 14 of 28 layers (3 + 4 + 7), whose attn_v become Q6_K (+473,088 B)
/// and ffn_down Q6_K (+17,504,256 B). Vectors in F32: 28 × (2 norms × 14,336 + biases 14,336 +
/// 2,048 + 2,048) + the final norm 14,336. Total 4,677,120,000 B.
#[test]
fn q4_k_m_of_qwen25_7b_by_hand() {
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let p = writer::plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let matrices =
        306_561_024 + 447_068_160 + 28 * (2 * 7_225_344 + 2 * 1_032_192 + 3 * 38_191_104) + 14 * (473_088 + 17_504_256);
    let vectors = 28 * (2 * 14_336 + 14_336 + 2_048 + 2_048) + 14_336;
    assert_eq!(matrices + vectors, 4_677_120_000u64);
    assert_eq!(p.iter().map(Planned::bytes).sum::<u64>(), 4_677_120_000);
    let count = |t: &str| p.iter().filter(|x| x.ty.name == t).count();
    assert_eq!((count("Q4_K"), count("Q6_K"), count("F32"), p.len()), (169, 29, 141, 339));
    // use_more_bits: the first eighth (0-2), the last (24-27), and every third between (5, 8, … 23).
    let q6_layers: Vec<usize> = (0..28)
        .filter(|i| p.iter().any(|x| x.name == format!("blk.{i}.attn_v.weight") && x.ty.name == "Q6_K"))
        .collect();
    assert_eq!(q6_layers, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]);
    let down: Vec<usize> = (0..28)
        .filter(|i| p.iter().any(|x| x.name == format!("blk.{i}.ffn_down.weight") && x.ty.name == "Q6_K"))
        .collect();
    assert_eq!(down, q6_layers);
}

/// The recipe is llama.cpp's, tensor by tensor: `llama-quantize Q4_K_M` of the same synthetic
/// Qwen2.5-7B, read back by llama.cpp's gguf-py (data/results/cpu/2026-11-24-llama-quantize-q4_k_m,
/// RUN.md), gave each tensor the type and bytes the lab plans. The lab's own Q4 plan (stages 1-2)
/// holds 4,425,437,184 B of it: Q6_K for the output layer only.
#[test]
fn q4_k_m_equals_llama_quantize() {
    let csv =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/cpu/2026-11-24-llama-quantize-q4_k_m/tensors.csv");
    let text = std::fs::read_to_string(csv).unwrap();
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let plan = writer::plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let mut rows = 0;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let p = plan
            .iter()
            .find(|p| p.name == f[0])
            .unwrap_or_else(|| panic!("llama.cpp wrote {}, the lab plans no such tensor", f[0]));
        assert_eq!((p.ty.name, p.bytes()), (f[1], f[2].parse::<u64>().unwrap()), "{}", f[0]);
        rows += 1;
    }
    assert_eq!(rows, plan.len());
    let lab = writer::plan(&cfg, FileTypes::LabQ4);
    assert_eq!(lab.iter().map(Planned::bytes).sum::<u64>(), 4_425_437_184);
    assert_eq!(vram_lab::estimate::weight_bytes(&cfg, Precision::Q4), 4_425_437_184);
}

/// Rows that are not whole Q4_K blocks fall back as llama.cpp's do: Qwen2.5-0.5B's 896-wide rows
/// (Q4_K → Q5_0, Q6_K → Q8_0, its tied embedding as the output layer in Q8_0) and 72B's
/// 29,568-wide ffn_down; a 70B-class model's attn_v takes Q5_K.
#[test]
fn fallbacks_and_the_70b_class() {
    let half = writer::plan(&DecoderConfig::preset("qwen2.5-0.5b").unwrap(), FileTypes::Llama(FileType::Q4KM));
    let ty = |p: &[Planned], n: &str| p.iter().find(|x| x.name == n).unwrap().ty.name;
    assert_eq!(ty(&half, "token_embd.weight"), "Q8_0");
    assert_eq!(ty(&half, "blk.0.attn_q.weight"), "Q5_0");
    assert_eq!(ty(&half, "blk.0.attn_v.weight"), "Q8_0");
    assert_eq!(ty(&half, "blk.0.ffn_down.weight"), "Q6_K"); // 4,864 = 19 × 256
    assert_eq!(ty(&half, "blk.3.ffn_down.weight"), "Q4_K"); // not a use_more_bits layer
    let big = writer::plan(&DecoderConfig::preset("qwen2.5-72b").unwrap(), FileTypes::Llama(FileType::Q4KM));
    assert_eq!(ty(&big, "blk.0.ffn_down.weight"), "Q8_0");
    assert_eq!(ty(&big, "blk.11.ffn_down.weight"), "Q5_0");
    assert_eq!(ty(&big, "blk.11.attn_v.weight"), "Q5_K");
    assert_eq!(ty(&big, "blk.0.attn_v.weight"), "Q6_K");
    // Q4_0's and Q8_0's output layers: Q6_K, and Q8_0 stays Q8_0; F16 leaves vectors in F32.
    let seven = DecoderConfig::preset("qwen2.5-7b").unwrap();
    assert_eq!(ty(&writer::plan(&seven, FileTypes::Llama(FileType::Q4_0)), "output.weight"), "Q6_K");
    assert_eq!(ty(&writer::plan(&seven, FileTypes::Llama(FileType::Q8_0)), "output.weight"), "Q8_0");
    let f16 = writer::plan(&seven, FileTypes::Llama(FileType::F16));
    assert_eq!((ty(&f16, "output.weight"), ty(&f16, "blk.0.attn_q.bias")), ("F16", "F32"));
}

/// A header-only GGUF of Qwen2.5-7B in llama.cpp's Q4_K_M mix: `estimate` prices its weights at
/// exactly the tensors' bytes, from the header alone, and says the file is truncated.
#[test]
fn estimate_prices_a_header_only_file_by_its_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("qwen2.5-7b-q4_k_m.gguf");
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let planned = writer::plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let md = writer::metadata(&cfg, FileTypes::Llama(FileType::Q4KM), None).unwrap();
    let mut f = std::fs::File::create(&path).unwrap();
    writer::write_header(&mut f, &md, &planned).unwrap();
    drop(f);

    let h = Header::read(&path).unwrap();
    assert_eq!(h.tensor_bytes().unwrap(), 4_677_120_000);
    assert!(h.truncated().is_some());
    let (g, truncated) = Gguf::open_header(&path).unwrap();
    assert!(truncated.is_some());
    let c = g.config().unwrap();
    let dims = |c: &DecoderConfig| {
        (
            c.vocab_size,
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.tie_word_embeddings,
        )
    };
    assert_eq!(dims(&c), dims(&cfg));
    assert_eq!(g.loaded_bytes(&cfg, Precision::Q4), 4_677_120_000);

    let out = tmp.path().join("est");
    let o = common::lab_quiet(&[
        "estimate",
        "--model",
        path.to_str().unwrap(),
        "--precisions",
        "q4",
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = common::output_text(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("truncated") && text.contains("priced from its header"), "{text}");
    // The CSV's text, not polars' display of it (which rounds to a few digits).
    let text = std::fs::read_to_string(out.join("estimate/estimate_ledger.csv")).unwrap();
    let row = text.lines().find(|l| l.split(',').nth(1) == Some("weights")).unwrap();
    let weights: f64 = row.split(',').nth(2).unwrap().parse().unwrap();
    assert_eq!((weights * 1048576.0).round() as u64, 4_677_120_000, "{weights} MiB");
}

/// Every recipe on the tiny model: the file holds the planned types at aligned offsets, is exactly
/// as long as its header says, loads, and its values come back within the type's rounding.
#[test]
fn written_files_read_back() {
    let cfg = common::tiny();
    let want = common::tensors(&cfg, 42); // the CLI's default seed
    let tmp = tempfile::tempdir().unwrap();
    // Each type's worst rounding relative to the tensor's largest value: 2^-8 for BF16, 2^-11
    // for F16, half a step of 1/127 for Q8_0 and its F16 scale's own rounding (127 · 2^-11 of a
    // step: (0.5 + 0.062) / 127 = 4.43e-3); the signed 6- and 4-bit types clamp the end
    // opposite their largest value, a whole step of 1/32 and 1/8 (a layout read wrongly errs by
    // 100 % and more).
    for (ftype, tol) in [
        (FileType::F32, 0.0),
        (FileType::Bf16, 4e-3),
        (FileType::F16, 5e-4),
        (FileType::Q8_0, 4.43e-3),
        (FileType::Q6K, 1.0 / 32.0),
        (FileType::Q4_0, 0.125),
        (FileType::Q4KM, 0.125),
    ] {
        let path = tmp.path().join(format!("tiny-{ftype}.gguf"));
        let o = common::lab_quiet(&[
            "quantize",
            "--model",
            "synthetic:tiny",
            "--type",
            &ftype.cli_name(),
            "--to",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{ftype}: {}", common::output_text(&o));
        let h = Header::read(&path).unwrap();
        let planned = writer::plan(&cfg, FileTypes::Llama(ftype));
        let got: Vec<(String, u32)> = h.tensors.iter().map(|t| (t.name.clone(), t.type_id)).collect();
        let exp: Vec<(String, u32)> = planned.iter().map(|t| (t.name.clone(), t.ty.id)).collect();
        assert_eq!(got, exp, "{ftype}");
        assert!(h.tensors.iter().all(|t| t.offset % 32 == 0 && h.data_offset.is_multiple_of(32)));
        assert_eq!(h.file_len, h.needs(), "{ftype}");
        assert_eq!(h.uint("general.file_type"), Some(ftype.llama_ftype() as u64));
        let (mut g, truncated) = Gguf::open_header(&path).unwrap();
        assert!(truncated.is_none());
        for spec in cfg.tensor_specs() {
            use vram_lab::model::load::weights::WeightSource;
            let got = g.load(&spec, Precision::F32, &Device::Cpu).unwrap().dense().unwrap();
            let w = &want[&spec.name];
            let err = common::max_abs_diff(&got, w) / common::max_abs(w).max(1e-6);
            assert!(err <= tol + 1e-7, "{ftype} {}: relative error {err}", spec.name);
        }
    }
}

/// A mixture's GGUF as llama.cpp's converter writes it: each layer's experts stacked in one
/// tensor of `[row, rows, experts]`, the router left in F32, the expert keys llama.cpp's loader
/// reads; 8 experts give the attention Mixtral's types (Q8_0 K and V, Q5_K output). A Mistral or
/// Mixtral is llama.cpp's `llama`, with Qwen2.5's tokenizer cut to its vocabulary.
#[test]
fn mixtures_and_mistral_are_written_as_llama_cpp_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |preset: &str| {
        let path = tmp.path().join(format!("{preset}.gguf"));
        let o = common::lab_quiet(&[
            "quantize",
            "--model",
            &format!("synthetic:{preset}"),
            "--type",
            "q4_k_m",
            "--to",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{preset}: {}", common::output_text(&o));
        Header::read(&path).unwrap()
    };
    let h = write("tiny-moe");
    let cfg = DecoderConfig::preset("tiny-moe").unwrap();
    assert_eq!(h.str("general.architecture"), Some("qwen3moe"));
    assert_eq!(h.uint("qwen3moe.expert_count"), Some(8));
    assert_eq!(h.uint("qwen3moe.expert_used_count"), Some(2));
    assert_eq!(h.uint("qwen3moe.expert_feed_forward_length"), Some(cfg.moe_intermediate_size.unwrap() as u64));
    assert_eq!(h.file_len, h.needs());
    let t = |name: &str| h.tensor(name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(t("blk.1.ffn_down_exps.weight").ne, vec![128, 256, 8]);
    assert_eq!(t("blk.1.ffn_gate_exps.weight").ne, vec![256, 128, 8]);
    assert_eq!(t("blk.0.ffn_gate_inp.weight").type_name(), "F32");
    assert_eq!(t("blk.0.attn_v.weight").type_name(), "Q8_0");
    assert_eq!(t("blk.0.attn_k.weight").type_name(), "Q8_0");
    assert_eq!(t("blk.0.attn_output.weight").type_name(), "Q5_K");
    let planned = writer::plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let got: Vec<(String, u32)> = h.tensors.iter().map(|t| (t.name.clone(), t.type_id)).collect();
    assert_eq!(got, planned.iter().map(|t| (t.name.clone(), t.ty.id)).collect::<Vec<_>>());

    let h = write("tiny-mistral");
    assert_eq!(h.str("general.architecture"), Some("llama"));
    assert_eq!(h.file_len, h.needs());

    // Gemma 3: its own architecture, four norms a layer under llama.cpp's names, the head tied,
    // the window; read back, the same config.
    let path = tmp.path().join("tiny-gemma.gguf");
    let h = write("tiny-gemma");
    assert_eq!(h.str("general.architecture"), Some("gemma3"));
    assert_eq!(h.uint("gemma3.attention.sliding_window"), Some(64));
    assert_eq!(h.uint("gemma3.attention.key_length"), Some(256));
    for n in ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm"] {
        let name = format!("blk.5.{n}.weight");
        assert_eq!(h.tensor(&name).unwrap_or_else(|| panic!("{name}")).type_name(), "F32");
    }
    assert!(h.tensor("output.weight").is_none());
    let cfg = DecoderConfig::preset("tiny-gemma").unwrap();
    let back = Gguf::open(&path).unwrap().config().unwrap();
    assert_eq!(back.model_type, cfg.model_type);
    assert_eq!((back.sliding_window, back.head_dim, back.tie_word_embeddings), (Some(64), Some(256), true));
    assert!((0..6).all(|il| back.is_swa(il) == cfg.is_swa(il)));
}

/// gpt-oss as llama.cpp's converter and `llama-quantize --type mxfp4_moe` write it: architecture
/// `gpt-oss`, experts in MXFP4 (gate and up split from transformers' interleaved gate_up_proj,
/// down transposed), every other matrix Q8_0, biases, sinks and router in F32, the window; the
/// experts' values read back are the checkpoint's within MXFP4's grid.
#[test]
fn gpt_oss_is_written_with_mxfp4_experts() {
    use candle_core::IndexOp;
    use vram_lab::model::gguf::mxfp4;
    use vram_lab::model::load::weights::WeightSource;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny-gpt-oss.gguf");
    let o = common::lab_quiet(&[
        "quantize",
        "--model",
        "synthetic:tiny-gpt-oss",
        "--type",
        "mxfp4_moe",
        "--to",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let h = Header::read(&path).unwrap();
    assert_eq!(h.str("general.architecture"), Some("gpt-oss"));
    assert_eq!(h.uint("gpt-oss.attention.sliding_window"), Some(64));
    assert_eq!(h.uint("gpt-oss.expert_feed_forward_length"), Some(256));
    assert!(h.get("gpt-oss.attention.sliding_window_pattern").is_none());
    assert_eq!(h.file_len, h.needs());
    let t = |name: &str| h.tensor(name).unwrap_or_else(|| panic!("{name}"));
    for n in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
        assert_eq!(t(&format!("blk.3.{n}.weight")).type_name(), "MXFP4", "{n}");
        assert_eq!(t(&format!("blk.3.{n}.bias")).type_name(), "F32", "{n}");
    }
    for n in ["attn_q.weight", "attn_output.weight", "output.weight", "token_embd.weight"] {
        let name = if n.contains('.') && n.starts_with("attn") { format!("blk.0.{n}") } else { n.to_string() };
        assert_eq!(t(&name).type_name(), "Q8_0", "{name}");
    }
    for n in ["attn_sinks.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias", "attn_output.bias"] {
        assert_eq!(t(&format!("blk.0.{n}")).type_name(), "F32", "{n}");
    }
    let cfg = DecoderConfig::preset("tiny-gpt-oss").unwrap();
    let back = Gguf::open(&path).unwrap().config().unwrap();
    assert_eq!(back.model_type, cfg.model_type);
    assert_eq!((back.sliding_window, back.experts(), back.head_dim()), (Some(64), cfg.experts(), 64));
    assert!((0..4).all(|il| back.is_swa(il) == cfg.is_swa(il)));

    // Layer 1's up experts: the odd columns of gate_up_proj, one row per output, each row the
    // MXFP4 blocks of the checkpoint's values (`quantize`'s seed, 42).
    let bytes = std::fs::read(&path).unwrap();
    let up = t("blk.1.ffn_up_exps.weight");
    let start = (h.data_offset + up.offset) as usize;
    let values = mxfp4::dequantize(&bytes[start..start + (256 * 256 * 8 / 32 * 17)]);
    let mut src = vram_lab::model::load::synthetic::Synthetic::new(cfg.clone(), 42);
    let spec = cfg.tensor_specs().into_iter().find(|s| s.name == "model.layers.1.mlp.experts.gate_up_proj").unwrap();
    let dense = src.load(&spec, Precision::F32, &Device::Cpu).unwrap().dense().unwrap();
    for (expert, out) in [(0, 0), (3, 17), (7, 255)] {
        let row: Vec<f32> = (0..256).map(|i| dense.i((expert, i, 2 * out + 1)).unwrap().to_scalar().unwrap()).collect();
        let got = &values[(expert * 256 + out) * 256..][..256];
        assert_eq!(got, mxfp4::dequantize(&mxfp4::quantize(&row)), "expert {expert}, output {out}");
    }
}

/// Qwen2.5's tokenizer in the metadata of a model with a smaller vocabulary (a synthetic Mixtral
/// writes it cut to its 32,000 ids): one token per embedding row, and only the merges whose two
/// parts and result are kept.
#[test]
fn a_tokenizer_larger_than_the_vocabulary_is_cut_to_it() {
    let tok = vram_lab::model::load::tokenizer::qwen25().unwrap();
    let mut cfg = DecoderConfig::preset("tiny-mistral").unwrap();
    cfg.vocab_size = 4096;
    let md = tokenizer::to_metadata(&tok, &cfg).unwrap();
    let get = |k: &str| md.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone()).unwrap();
    let strings = |k: &str| -> Vec<String> {
        match get(k) {
            candle_core::quantized::gguf_file::Value::Array(a) => {
                a.into_iter().map(|v| v.to_string().unwrap().clone()).collect()
            }
            _ => panic!("{k}"),
        }
    };
    let tokens = strings("tokenizer.ggml.tokens");
    assert_eq!(tokens.len(), 4096);
    let kept: std::collections::HashSet<&str> = tokens.iter().map(|s| s.as_str()).collect();
    let merges = strings("tokenizer.ggml.merges");
    assert!(!merges.is_empty() && merges.len() < 150_000, "{}", merges.len());
    for m in &merges {
        let (a, b) = m.split_once(' ').unwrap();
        assert!(kept.contains(a) && kept.contains(b) && kept.contains(format!("{a}{b}").as_str()), "{m}");
    }
    // <|endoftext|> (151643) is past the vocabulary: no padding id names it.
    assert!(!md.iter().any(|(k, _)| k == "tokenizer.ggml.padding_token_id"));
}

/// A type ggml defines and the lab does not compute (IQ2_XXS) is priced by `estimate` from its
/// blocks, and loading names it in one line.
#[test]
fn iq_types_are_priced_not_computed() {
    let cfg = common::tiny();
    let mut planned = writer::plan(&cfg, FileTypes::Llama(FileType::Q8_0));
    let iq = GgmlType::from_name("IQ2_XXS").unwrap();
    let q = planned.iter_mut().find(|t| t.name == "blk.0.ffn_gate.weight").unwrap();
    q.ty = iq;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("iq.gguf");
    let mut f = std::fs::File::create(&path).unwrap();
    writer::write_header(&mut f, &writer::metadata(&cfg, FileTypes::Llama(FileType::Q8_0), None).unwrap(), &planned)
        .unwrap();
    let data: u64 = planned.iter().map(|t| t.bytes().next_multiple_of(32)).sum();
    use std::io::Write;
    f.write_all(&vec![0u8; data as usize]).unwrap();
    drop(f);
    let h = Header::read(&path).unwrap();
    assert!(h.truncated().is_none());
    // 512 × 256 values in 66-byte blocks of 256.
    assert_eq!(h.tensor("blk.0.ffn_gate.weight").unwrap().bytes(), Some(512 * 66));
    assert_eq!(h.tensor_bytes().unwrap(), planned.iter().map(Planned::bytes).sum::<u64>());

    let o = common::lab_quiet(&[
        "estimate",
        "--model",
        path.to_str().unwrap(),
        "--precisions",
        "q4",
        "--out",
        tmp.path().join("e").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let o = common::lab_quiet(&[
        "generate",
        "--model",
        path.to_str().unwrap(),
        "--precision",
        "q4",
        "--prompt-ids",
        "1,2",
        "--max-new-tokens",
        "1",
    ]);
    let text = common::output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("IQ2_XXS") && text.contains("priced"), "{text}");
}

const STRINGS: [&str; 15] = [
    "显存管理是高性能计算的核心,",
    "Hello world",
    "The KV cache grows with every token.",
    "  leading spaces",
    "tabs\tand\nnewlines\r\n",
    "emoji 🚀🔥 and 中文混合 text",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "<|endoftext|>",
    "a<|endoftext|>b",
    "don't we'll I'M",
    "1234567890 3.14159 1e-6",
    "ÀÉÎÕÜ ñ ß",
    "",
    " ",
    "\n\n\n",
];

/// A model directory's tokenizer.json written into a GGUF's metadata (as llama.cpp's converter
/// does) and built back from it encodes every string as the original; the F32 file generates, from
/// a text prompt through that tokenizer alone, the tokens transformers generated.
#[test]
fn tokenizer_travels_inside_the_file() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fixture-f32.gguf");
    let o = common::lab_quiet(&[
        "quantize",
        "--model",
        fixture.to_str().unwrap(),
        "--type",
        "f32",
        "--to",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    assert!(common::output_text(&o).contains("with its tokenizer"));

    let original = tokenizers::Tokenizer::from_file(fixture.join("tokenizer.json")).unwrap();
    let h = Header::read(&path).unwrap();
    assert_eq!(h.str("tokenizer.ggml.model"), Some("gpt2"));
    let built = tokenizer::from_header(&h).unwrap().expect("a tokenizer in the metadata");
    let mut n = 0;
    for s in STRINGS
        .iter()
        .map(|s| s.to_string())
        .chain(["x".repeat(300)])
        .chain((0..200).map(|i| format!("{} {i} 显存{} tok{}", STRINGS[i % STRINGS.len()], i * 7919, i % 13)))
    {
        let a = original.encode(s.as_str(), false).unwrap().get_ids().to_vec();
        let b = built.encode(s.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(a, b, "{s:?}");
        assert_eq!(original.decode(&a, false).unwrap(), built.decode(&b, false).unwrap());
        n += 1;
    }
    assert!(n >= 200);

    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap()).unwrap();
    let ids =
        |k: &str| -> Vec<u32> { expected[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect() };
    let src = ModelSource::parse(path.to_str().unwrap()).unwrap();
    let lm = source::load(
        &src,
        &SourceOptions::default(),
        Precision::F32,
        &Device::Cpu,
        &MemoryProbe::new(&Device::Cpu),
        None,
    )
    .unwrap();
    let tok = lm.tokenizer.as_ref().expect("the file's own tokenizer");
    let prompt = tok.encode(expected["prompt"].as_str().unwrap(), false).unwrap().get_ids().to_vec();
    assert_eq!(prompt, ids("prompt_ids"));
    let want = ids("generated_ids_cpu");
    let got = model::generate(&lm.model, &prompt, &GenerateConfig { max_new_tokens: want.len(), ..Default::default() })
        .unwrap()
        .generated_ids;
    assert_eq!(got, want);
    let _ = DType::F32;
}

/// The Qwen2.5 tokenizer the lab ships encodes 300 strings (the report's two prompts, Chinese,
/// English, code, emoji, whitespace, special tokens) to the ids Qwen2.5's own tokenizer.json gives
/// (recorded with HF tokenizers by scripts/make_tokenizer_fixture.py); so does the same tokenizer
/// after a trip through a GGUF file's metadata (llama.cpp's `qwen2` pre-tokenizer); and a synthetic
/// Qwen2.5 preset tokenizes with it.
#[test]
fn shipped_qwen25_tokenizer_equals_the_real_one() {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2.5-tokenizer-ids.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let cases: Vec<(String, Vec<u32>)> = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["text"].as_str().unwrap().to_string(),
                c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect(),
            )
        })
        .collect();
    assert_eq!(cases.len(), 300);
    let shipped = model::load::tokenizer::qwen25().unwrap();
    assert_eq!(shipped.get_vocab_size(true), 151_665);

    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("header.gguf");
    let md = writer::metadata(&cfg, FileTypes::Llama(FileType::Q4KM), Some(&shipped)).unwrap();
    writer::write_header(
        &mut std::fs::File::create(&path).unwrap(),
        &md,
        &writer::plan(&cfg, FileTypes::Llama(FileType::Q4KM)),
    )
    .unwrap();
    let h = Header::read(&path).unwrap();
    assert_eq!(
        (h.str("tokenizer.ggml.pre"), h.strings("tokenizer.ggml.tokens").unwrap().len()),
        (Some("qwen2"), 152_064)
    );
    let types = h.ints("tokenizer.ggml.token_type").unwrap();
    // <|im_start|> a control token, <tool_call> user-defined, the padding ids unused.
    assert_eq!((types[151_644], types[151_657], types[151_665], types[100]), (3, 4, 5, 1));
    let from_gguf = tokenizer::from_header(&h).unwrap().unwrap();

    for (text, ids) in &cases {
        assert_eq!(&shipped.encode(text.as_str(), false).unwrap().get_ids().to_vec(), ids, "shipped: {text:?}");
        assert_eq!(
            &from_gguf.encode(text.as_str(), false).unwrap().get_ids().to_vec(),
            ids,
            "from GGUF metadata: {text:?}"
        );
        assert_eq!(shipped.decode(ids, false).unwrap(), from_gguf.decode(ids, false).unwrap());
    }
    // The report's prompts: "显存管理是高性能计算的核心," × 20 is 160 tokens, "人工智能…" × 10 is 90.
    assert_eq!((cases[0].1.len(), cases[1].1.len()), (160, 90));

    let opened = source::open(&ModelSource::parse("synthetic:qwen2.5-7b").unwrap(), &SourceOptions::default()).unwrap();
    let prompt = vram_lab::experiments::anatomy::report_prompt(opened.tokenizer.as_ref(), cfg.vocab_size, 0).unwrap();
    assert_eq!(prompt, cases[0].1);
    let tiny = source::open(&ModelSource::parse("synthetic:tiny").unwrap(), &SourceOptions::default()).unwrap();
    assert!(tiny.tokenizer.is_none(), "the tiny model's 1,024 ids cannot hold Qwen2.5's");
}

/// Stage 1 on a GGUF file predicts the weights from the file's own tensors (a Q4_K_M file holds
/// more than the lab's Q4 plan would), and what it loads is that.
#[test]
fn anatomy_predicts_a_gguf_by_its_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny-q4_k_m.gguf");
    let o = common::lab_quiet(&[
        "quantize",
        "--model",
        "synthetic:tiny",
        "--type",
        "q4_k_m",
        "--to",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let stored = Header::read(&path).unwrap().tensor_bytes().unwrap();
    let cfg = common::tiny();
    assert_ne!(
        stored,
        vram_lab::estimate::weight_bytes(&cfg, Precision::Q4),
        "the tiny model's Q4_K_M and the lab's plan should differ"
    );
    let out = tmp.path().join("anatomy");
    let o = common::lab_quiet(&[
        "anatomy",
        "--model",
        path.to_str().unwrap(),
        "--precisions",
        "q4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    // The CSV's text, not polars' display of it (which rounds to a few digits).
    let text = std::fs::read_to_string(out.join("anatomy/anatomy.csv")).unwrap();
    let (head, row) = (text.lines().next().unwrap(), text.lines().nth(1).unwrap());
    let num =
        |c: &str| row.split(',').nth(head.split(',').position(|h| h == c).unwrap()).unwrap().parse::<f64>().unwrap();
    assert_eq!((num("predicted_weights_gib") * (1u64 << 30) as f64).round() as u64, stored);
    // On CPU the heap's own bookkeeping adds a little to the bytes measured.
    assert!(num("weights_vs_predicted_pct").abs() < 1.0, "{}", num("weights_vs_predicted_pct"));
}

/// The peak resident bytes of `vram-lab args…` (getrusage of the child), and whether it succeeded.
// The child is reaped by wait4, which std's wait does not do: it also returns the child's rusage.
#[allow(clippy::zombie_processes)]
fn peak_rss(args: &[&str]) -> (u64, bool) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage the call fills; the pid is our own child, reaped here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    (usage.ru_maxrss as u64 * 1024, libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// A metadata array the lab never reads costs no memory: `estimate` on a tiny model whose GGUF
/// header also holds a 100 MB U8 array peaks within 64 MiB of the same file without it (read
/// into values, the array was 32 bytes an item: 3.2 GB).
#[test]
fn an_unread_metadata_array_costs_no_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small.gguf");
    let (_, ok) =
        peak_rss(&["quantize", "--model", "synthetic:tiny", "--to", small.to_str().unwrap(), "--device", "cpu"]);
    assert!(ok, "quantize failed");
    let bytes = std::fs::read(&small).unwrap();
    // One entry more after the preamble (magic, version, tensor count, metadata count), its length a
    // multiple of the alignment so the tensors' data keeps its place.
    let key = b"general.unread_blob";
    let entry = |n: u64| 8 + key.len() as u64 + 4 + 4 + 8 + n;
    let mut n = 100u64 << 20;
    while entry(n) % 32 != 0 {
        n += 1;
    }
    let mut big = bytes[..24].to_vec();
    let kv = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    big[16..24].copy_from_slice(&(kv + 1).to_le_bytes());
    big.extend((key.len() as u64).to_le_bytes());
    big.extend(key);
    big.extend(9u32.to_le_bytes());
    big.extend(0u32.to_le_bytes());
    big.extend(n.to_le_bytes());
    big.resize(big.len() + n as usize, 7);
    big.extend(&bytes[24..]);
    let big_path = tmp.path().join("big.gguf");
    std::fs::write(&big_path, &big).unwrap();
    drop(big);
    let estimate = |m: &Path, out: &str| {
        let out = tmp.path().join(out);
        peak_rss(&[
            "estimate",
            "--model",
            m.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let (without, ok_a) = estimate(&small, "a");
    let (with, ok_b) = estimate(&big_path, "b");
    assert!(ok_a && ok_b, "estimate failed on the small or the big file");
    eprintln!("estimate peak RSS: {} MiB without the array, {} MiB with it", without >> 20, with >> 20);
    assert!(
        with < without + (64 << 20),
        "{} MiB with a 100 MB unread array, {} MiB without",
        with >> 20,
        without >> 20
    );
}
