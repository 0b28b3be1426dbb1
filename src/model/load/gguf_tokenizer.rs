//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`, as llama.cpp's converter writes it),
//! built into a `tokenizers::Tokenizer` that encodes as the model's tokenizer.json does; and the
//! other way, a tokenizer.json written into a file's metadata.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::load::tokenizer::{build, Added, Pre};
use candle_core::quantized::gguf_file::Value;
use serde_json::{json, Value as Json};
use std::collections::HashMap;
use tokenizers::Tokenizer;

use crate::model::gguf::header::Header;

/// llama.cpp's token types (`llama_token_type`).
pub const NORMAL: i64 = 1;
pub const CONTROL: i64 = 3;
pub const USER_DEFINED: i64 = 4;
pub const UNUSED: i64 = 5;

/// A tokenizer from a file's metadata, or None when it carries none. BPE of the gpt2 kind only
/// (every Qwen2 GGUF); another kind is an error that names it.
pub fn from_header(h: &Header) -> Result<Option<Tokenizer>> {
    let path = h.path.display();
    let Some(model) = h.str("tokenizer.ggml.model") else { return Ok(None) };
    if model != "gpt2" {
        return Err(LabError::input(format!(
            "{path}: tokenizer.ggml.model `{model}`: the lab builds byte-level BPE (gpt2) tokenizers"
        )));
    }
    let pre_name = h.str("tokenizer.ggml.pre").unwrap_or("default");
    let pre = Pre::from_gguf(pre_name).ok_or_else(|| {
        LabError::input(format!(
            "{path}: tokenizer.ggml.pre `{pre_name}`: the lab builds qwen2 and gpt-2 pre-tokenizers"
        ))
    })?;
    let bad = |what: &str| {
        LabError::input(format!("{path}: tokenizer.ggml.{what} is missing or not an array of the right kind"))
    };
    let tokens = h.strings("tokenizer.ggml.tokens").ok_or_else(|| bad("tokens"))?;
    let merges = h.strings("tokenizer.ggml.merges").ok_or_else(|| bad("merges"))?;
    let types = match h.ints("tokenizer.ggml.token_type") {
        Some(t) if t.len() == tokens.len() => t,
        Some(_) => {
            return Err(LabError::input(format!("{path}: tokenizer.ggml.token_type has another length than tokens")))
        }
        None => vec![NORMAL; tokens.len()],
    };
    let mut vocab = serde_json::Map::new();
    let mut added = vec![];
    for (id, (tok, ty)) in tokens.iter().zip(&types).enumerate() {
        match *ty {
            CONTROL | USER_DEFINED => {
                added.push(Added { id: id as u32, content: tok.to_string(), special: *ty == CONTROL })
            }
            UNUSED => {}
            _ => {
                vocab.insert(tok.to_string(), json!(id));
            }
        }
    }
    let merges = merges.iter().map(|m| m.to_string()).collect();
    build(vocab, merges, &added, pre).map(Some).map_err(|e| LabError::input(format!("{path}: {e}")))
}

/// A tokenizer.json as llama.cpp's converter stores it: every id up to the model's vocabulary
/// (`[PADn]` where the tokenizer has none), token types, merges as "a b" strings, special ids. A
/// tokenizer larger than the vocabulary (Qwen2.5's in a synthetic Mixtral) is cut to it: the ids
/// past it and the merges that make or use them are left out, as llama.cpp's loader needs one
/// token per embedding row.
pub fn to_metadata(tok: &Tokenizer, cfg: &DecoderConfig) -> Result<Vec<(String, Value)>> {
    let spec: Json =
        serde_json::from_str(&tok.to_string(false).map_err(|e| LabError::other(format!("tokenizer: {e}")))?)?;
    let pre = Pre::from_json(&spec["pre_tokenizer"]).ok_or_else(|| {
        LabError::input(
            "the tokenizer's pre-tokenizer is neither Qwen2's nor GPT-2's: the lab cannot name it for a GGUF file",
        )
    })?;
    if spec["model"]["type"] != "BPE" {
        return Err(LabError::input(
            "the tokenizer is not BPE: the lab writes byte-level BPE tokenizers into GGUF files",
        ));
    }
    let added: HashMap<u32, bool> = spec["added_tokens"]
        .as_array()
        .map(|a| {
            a.iter().filter_map(|t| Some((t["id"].as_u64()? as u32, t["special"].as_bool().unwrap_or(false)))).collect()
        })
        .unwrap_or_default();
    let n = cfg.vocab_size;
    let (mut tokens, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for id in 0..n as u32 {
        match tok.id_to_token(id) {
            Some(t) => {
                // As llama.cpp's converter: an added token is a control token when marked special
                // or when it looks like one (`<|fim_prefix|>` is not marked), else user-defined.
                let looks_special = t.starts_with("<|") && t.ends_with("|>");
                types.push(Value::I32(match added.get(&id) {
                    Some(&special) if special || looks_special => CONTROL,
                    Some(_) => USER_DEFINED,
                    None => NORMAL,
                } as i32));
                tokens.push(Value::String(t));
            }
            None => {
                tokens.push(Value::String(format!("[PAD{id}]")));
                types.push(Value::I32(UNUSED as i32));
            }
        }
    }
    let merges: Vec<Value> = spec["model"]["merges"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| match x {
                    Json::String(s) => Some(s.clone()),
                    Json::Array(p) => Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?)),
                    _ => None,
                })
                .filter(|m| {
                    let kept = |t: &str| tok.token_to_id(t).is_some_and(|id| (id as usize) < n);
                    m.split_once(' ').is_some_and(|(a, b)| kept(a) && kept(b) && kept(&format!("{a}{b}")))
                })
                .map(Value::String)
                .collect()
        })
        .unwrap_or_default();
    let mut md = vec![
        ("tokenizer.ggml.model".to_string(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".to_string(), Value::String(pre.gguf_name().into())),
        ("tokenizer.ggml.tokens".to_string(), Value::Array(tokens)),
        ("tokenizer.ggml.token_type".to_string(), Value::Array(types)),
        ("tokenizer.ggml.merges".to_string(), Value::Array(merges)),
    ];
    if let Some(eos) = cfg.eos_ids().first() {
        md.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(*eos)));
    }
    // Qwen2's converter sets bos to <|endoftext|> and adds no bos.
    if let Some(bos) = cfg.bos_token_id.or(tok.token_to_id("<|endoftext|>")).filter(|&id| (id as usize) < n) {
        md.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(bos)));
    }
    if let Some(pad) = tok.token_to_id("<|endoftext|>").filter(|&id| (id as usize) < n) {
        md.push(("tokenizer.ggml.padding_token_id".into(), Value::U32(pad)));
    }
    md.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
    Ok(md)
}
