//! Writes a GGUF file one tensor at a time: the header first (every tensor's type and offset is
//! known from the recipe before any value is read), then each tensor quantized and appended, so
//! nothing larger than one tensor is held (a BF16 7B file is 15 GB).

use crate::error::{LabError, Result};
use crate::model::config::{windowed_in_pattern, DecoderConfig, Family, GEMMA3_PATTERN, GPT_OSS_PATTERN};
use crate::model::gguf::header::DEFAULT_ALIGNMENT;
use crate::model::gguf::recipe::{self, FileType, ModelClass};
use crate::model::gguf::types::GgmlType;
use crate::model::gguf::{gguf_groups, gguf_tensors, Part};
use crate::model::load::gguf_tokenizer as tokenizer;
use crate::model::load::weights::WeightSource;
use crate::model::precision::{ggml_dtype_for, Precision};
use crate::model::quantize::quantize_rows;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::QTensor;
use candle_core::Device;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;

/// Which types a written file holds: one of llama-quantize's recipes, or the plan the lab's `q4`
/// precision loads (Q4_K, Q6_K for the output layer: what stages 1-2 measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileTypes {
    Llama(FileType),
    LabQ4,
}

/// One tensor of the file to write.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Planned {
    pub name: String,
    /// ggml's order: row length first.
    pub ne: Vec<u64>,
    #[serde(serialize_with = "type_name")]
    pub ty: GgmlType,
}

fn type_name<S: serde::Serializer>(t: &GgmlType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(t.name)
}

impl Planned {
    pub fn bytes(&self) -> u64 {
        self.ty.bytes_of(self.ne.iter().map(|&d| d as u128).product()).unwrap_or(0) as u64
    }
}

/// Every tensor of `cfg` with the type `file` gives it, in the checkpoint's order.
pub fn plan(cfg: &DecoderConfig, file: FileTypes) -> Vec<Planned> {
    let named = gguf_tensors(cfg);
    let types: Vec<GgmlType> = match file {
        FileTypes::Llama(ftype) => {
            let tensors: Vec<recipe::Tensor> = named.iter().map(|(n, ne)| recipe::Tensor { name: n, ne }).collect();
            // The converter writes vectors as F32; they keep that type.
            recipe::plan(ftype, ModelClass::of(cfg), &tensors, |_| GgmlType::of(candle_core::quantized::GgmlDType::F32))
        }
        FileTypes::LabQ4 => {
            cfg.tensor_specs().iter().map(|s| GgmlType::of(ggml_dtype_for(s, cfg.tie_word_embeddings))).collect()
        }
    };
    named.into_iter().zip(types).map(|((name, ne), ty)| Planned { name, ne, ty }).collect()
}

/// The `<arch>.*` keys llama.cpp's loader reads (qwen2, qwen3, qwen3moe, llama, gemma3, gpt-oss),
/// `general.*`, and the tokenizer when there is one. Mistral and Mixtral are llama.cpp's `llama`, as
/// its converter writes them: without a sliding window (llama.cpp's llama graph has none, so it
/// attends to the whole cache). Not written: gpt-oss's YaRN (dropped with its config, it moves no
/// byte). Refused: Llama 3.1's scaled RoPE (llama.cpp carries it as a `rope_freqs` tensor the lab
/// does not write).
pub fn metadata(
    cfg: &DecoderConfig,
    file: FileTypes,
    tok: Option<&tokenizers::Tokenizer>,
) -> Result<Vec<(String, Value)>> {
    let arch = gguf_arch(cfg)?;
    let u = |v: usize| Value::U32(v as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("vram-lab {arch}"))),
        (key("block_count"), u(cfg.num_hidden_layers)),
        (key("context_length"), u(cfg.max_position_embeddings)),
        (key("embedding_length"), u(cfg.hidden_size)),
        (key("feed_forward_length"), u(cfg.intermediate_size)),
        (key("attention.head_count"), u(cfg.num_attention_heads)),
        (key("attention.head_count_kv"), u(cfg.num_key_value_heads)),
        (key("rope.freq_base"), Value::F32(cfg.rope_theta as f32)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(cfg.rms_norm_eps as f32)),
    ];
    // Written where the head is not hidden / heads (Qwen3-0.6B), as convert_hf_to_gguf.py does.
    if cfg.q_dim() != cfg.hidden_size {
        md.push((key("attention.key_length"), u(cfg.head_dim())));
        md.push((key("attention.value_length"), u(cfg.head_dim())));
    }
    if arch == "llama" {
        md.push((key("rope.dimension_count"), u(cfg.head_dim())));
    }
    // Gemma 3's and gpt-oss's window, and its pattern where it is not llama.cpp's default for
    // the family.
    let default_pattern = match cfg.model_type {
        Family::Gemma3 => Some(GEMMA3_PATTERN),
        Family::GptOss => Some(GPT_OSS_PATTERN),
        _ => None,
    };
    if let (Some(default), Some(window)) = (default_pattern, cfg.sliding_window) {
        md.push((key("attention.sliding_window"), u(window)));
        let pattern = swa_pattern(cfg)?;
        if pattern != default {
            md.push((key("attention.sliding_window_pattern"), u(pattern)));
        }
    }
    if let Some(e) = cfg.experts() {
        md.push((key("expert_count"), u(e.experts)));
        md.push((key("expert_used_count"), u(e.active)));
        if arch != "llama" {
            md.push((key("expert_feed_forward_length"), u(e.width)));
        }
    }
    if let FileTypes::Llama(ftype) = file {
        md.push(("general.file_type".into(), Value::U32(ftype.llama_ftype())));
        md.push(("general.quantization_version".into(), Value::U32(2)));
    }
    match tok {
        Some(t) => md.extend(tokenizer::to_metadata(t, cfg)?),
        None => {
            if let Some(bos) = cfg.bos_token_id {
                md.push(("tokenizer.ggml.bos_token_id".into(), u(bos as usize)));
            }
            if let Some(eos) = cfg.eos_ids().first() {
                md.push(("tokenizer.ggml.eos_token_id".into(), u(*eos as usize)));
            }
        }
    }
    Ok(md)
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&x.to_le_bytes()),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[*x as u8]),
        Value::String(s) => put_str(w, s),
        Value::Array(items) => {
            // GGUF arrays hold one type; an empty one is written as U8.
            w.write_all(&items.first().map(value_type).unwrap_or(0).to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|i| put_value(w, i))
        }
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
    }
}

fn pad(w: &mut (impl Write + Seek)) -> std::io::Result<()> {
    let at = w.stream_position()?;
    let n = at.next_multiple_of(DEFAULT_ALIGNMENT) - at;
    w.write_all(&vec![0u8; n as usize])
}

/// The header (GGUF v3): metadata, then each tensor's name, shape, type and offset, padded to the
/// alignment. Written alone it is a header-only file, which `estimate` prices as truncated.
pub fn write_header(w: &mut (impl Write + Seek), md: &[(String, Value)], tensors: &[Planned]) -> std::io::Result<()> {
    w.write_all(b"GGUF")?;
    w.write_all(&3u32.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(md.len() as u64).to_le_bytes())?;
    for (k, v) in md {
        put_str(w, k)?;
        w.write_all(&value_type(v).to_le_bytes())?;
        put_value(w, v)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(w, &t.name)?;
        w.write_all(&(t.ne.len() as u32).to_le_bytes())?;
        t.ne.iter().try_for_each(|d| w.write_all(&d.to_le_bytes()))?;
        w.write_all(&t.ty.id.to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        offset = (offset + t.bytes()).next_multiple_of(DEFAULT_ALIGNMENT);
    }
    pad(w)
}

/// One tensor's values in `ty`, as the bytes the file stores.
fn encode(dense: &candle_core::Tensor, ty: GgmlType) -> Result<Vec<u8>> {
    if ty.name == "MXFP4" {
        return Ok(super::mxfp4::quantize(&dense.flatten_all()?.to_vec1::<f32>()?));
    }
    let q = ty.candle().ok_or_else(|| LabError::input(format!("the lab cannot write {ty} blocks")))?;
    let qt = if dense.rank() == 2 && ty.is_block_quantized() {
        quantize_rows(dense, q, &Device::Cpu)?
    } else {
        QTensor::quantize(&dense.to_dtype(candle_core::DType::F32)?, q)?
    };
    Ok(qt.data()?.into_owned())
}

/// The windowed layers as one number (`is_swa`'s pattern): `layer_types` that no pattern gives
/// are refused (the lab writes no per-layer list).
fn swa_pattern(cfg: &DecoderConfig) -> Result<usize> {
    let layers = cfg.num_hidden_layers;
    let asked: Vec<bool> = (0..layers).map(|il| cfg.is_swa(il)).collect();
    (1..=layers + 1).find(|&p| asked.iter().enumerate().all(|(il, &swa)| swa == windowed_in_pattern(il, p))).ok_or_else(
        || {
            LabError::input(
                "layer_types: the windowed layers follow no pattern of one number; the lab writes none other",
            )
        },
    )
}

/// The `general.architecture` llama.cpp's converter writes for `cfg`'s family.
fn gguf_arch(cfg: &DecoderConfig) -> Result<&'static str> {
    match cfg.model_type {
        Family::Qwen2 | Family::Qwen3 => Ok(cfg.model_type.name()),
        Family::Qwen3Moe => Ok("qwen3moe"),
        Family::Llama if cfg.rope_scaling.is_none() => Ok("llama"),
        Family::Mistral | Family::Mixtral => Ok("llama"),
        Family::Gemma3 => Ok("gemma3"),
        Family::GptOss => Ok("gpt-oss"),
        other => Err(LabError::input(format!(
            "the lab writes GGUF files without RoPE scaling, not {} with rope_scaling (llama.cpp's convert_hf_to_gguf.py writes those)",
            other.name(),
        ))),
    }
}

/// The values of `dense` a GGUF tensor holds (`Part`): gpt-oss's down_proj transposed, its
/// gate_up_proj transposed and split into the even (gate) and odd (up) rows.
fn take(dense: candle_core::Tensor, part: Part) -> Result<candle_core::Tensor> {
    let n = dense.rank();
    let t = if n >= 3 && part != Part::Whole { dense.transpose(n - 2, n - 1)?.contiguous()? } else { dense };
    let odd = match part {
        Part::Gate => 0,
        Part::Up => 1,
        Part::Whole | Part::Transposed => return Ok(t),
    };
    let dim = if n >= 3 { n - 2 } else { n - 1 };
    let dims = t.dims();
    let split = [&dims[..dim], &[dims[dim] / 2, 2], &dims[dim + 1..]].concat();
    Ok(t.reshape(split)?.narrow(dim + 1, odd, 1)?.squeeze(dim + 1)?.contiguous()?)
}

/// One checkpoint tensor's values (the `part` a GGUF tensor takes) in `ty`; in a `llama` file
/// (`permuted`) q's and k's rows in llama.cpp's RoPE order, as its converter writes them.
fn encode_spec(
    cfg: &DecoderConfig,
    source: &mut dyn WeightSource,
    spec: &crate::model::config::TensorSpec,
    part: Part,
    ty: GgmlType,
    permuted: bool,
) -> Result<Vec<u8>> {
    let dense = take(source.load(spec, Precision::F32, &Device::Cpu)?.dense()?, part)?;
    let bytes = encode(&dense, ty)?;
    if !permuted || !spec.name.ends_with(".weight") {
        return Ok(bytes);
    }
    let heads = match spec.name.rsplit('.').nth(1) {
        Some("q_proj") => cfg.num_attention_heads,
        Some("k_proj") => cfg.num_key_value_heads,
        _ => return Ok(bytes),
    };
    super::permute::reorder_rows(&bytes, &super::permute::file_to_checkpoint(spec.shape[0], heads)?)
}

/// Writes `cfg`'s weights from `source` as a GGUF file of the types `which` names, with the tokenizer's
/// metadata when there is one; `each` runs after every tensor. Returns the tensors written.
pub fn write_gguf(
    cfg: &DecoderConfig,
    source: &mut dyn WeightSource,
    out: &Path,
    which: FileTypes,
    tok: Option<&tokenizers::Tokenizer>,
    mut each: impl FnMut(&Planned),
) -> Result<Vec<Planned>> {
    let tensors = plan(cfg, which);
    let md = metadata(cfg, which, tok)?;
    // Nothing of the user's is replaced: not a file, a link or a device at `out`.
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(LabError::input(format!(
            "{} already exists: the lab writes a new file only (choose another path)",
            out.display()
        )));
    }
    let tmp = out.with_extension("gguf.tmp");
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(&tmp)
    }
    .map_err(|e| LabError::input(format!("cannot create {}: {e}", tmp.display())))?;
    let mut w = BufWriter::with_capacity(8 << 20, file);
    write_header(&mut w, &md, &tensors)?;
    let specs = cfg.tensor_specs();
    let permuted = gguf_arch(cfg)? == "llama";
    for (g, t) in gguf_groups(cfg).iter().zip(&tensors) {
        // A merged tensor is its experts' rows one after another.
        let mut bytes = Vec::with_capacity(t.bytes() as usize);
        for &i in &g.held {
            bytes.extend(encode_spec(cfg, source, &specs[i], g.part, t.ty, permuted)?);
        }
        // The header already gave every offset: a tensor of another size would shift the rest.
        if bytes.len() as u64 != t.bytes() {
            return Err(LabError::other(format!(
                "{}: {} bytes encoded, the header says {}",
                t.name,
                bytes.len(),
                t.bytes()
            )));
        }
        w.write_all(&bytes)?;
        pad(&mut w)?;
        each(t);
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, out)?;
    Ok(tensors)
}

/// Tensor count and bytes per type, largest first, for the summary lines.
pub fn bytes_by_type(tensors: &[Planned]) -> Vec<(String, usize, u64)> {
    super::types::tally(tensors.iter().map(|t| (t.ty.name.to_string(), t.bytes())))
}
