//! Byte-level BPE tokenizers built in the lab: from a vocabulary and merges (a GGUF file's
//! metadata, `load::gguf_tokenizer`) and the Qwen2.5 tokenizer the lab ships (data/tokenizer/, see its
//! NOTICE), so synthetic presets tokenize text as the real model does with no model hub.

use crate::error::{LabError, Result};
use serde_json::{json, Map, Value as Json};
use std::io::Read;
use tokenizers::Tokenizer;

/// Qwen2's pre-tokenizer split, as its tokenizer.json has it (llama.cpp's `qwen2` pre type).
pub const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split before BPE, by llama.cpp's `tokenizer.ggml.pre` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pre {
    /// Qwen2's regex, then byte-level without a regex (Qwen2, Qwen2.5, DeepSeek-R1's Qwen distills).
    Decoder,
    /// GPT-2's byte-level regex.
    Gpt2,
}

impl Pre {
    pub fn from_gguf(name: &str) -> Option<Self> {
        match name {
            "qwen2" | "deepseek-r1-qwen" => Some(Self::Decoder),
            "gpt-2" | "default" => Some(Self::Gpt2),
            _ => None,
        }
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Decoder => "qwen2",
            Self::Gpt2 => "gpt-2",
        }
    }

    /// From a tokenizer.json's `pre_tokenizer`.
    pub fn from_json(pre: &Json) -> Option<Self> {
        if pre["type"] == "ByteLevel" && pre["use_regex"] != false {
            return Some(Self::Gpt2);
        }
        let parts = pre["pretokenizers"].as_array()?;
        let split = parts.iter().find(|p| p["type"] == "Split")?;
        (split["pattern"]["Regex"] == QWEN2_SPLIT && parts.iter().any(|p| p["type"] == "ByteLevel"))
            .then_some(Self::Decoder)
    }

    fn pre_tokenizer(self) -> Json {
        match self {
            Self::Decoder => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}),
            Self::Gpt2 => {
                json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})
            }
        }
    }
}

/// A token outside BPE's vocabulary, matched whole before BPE runs (`<|im_start|>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    pub id: u32,
    pub content: String,
    /// Special tokens are dropped when decoding with `skip_special_tokens`.
    pub special: bool,
}

/// A byte-level BPE tokenizer as tokenizer.json describes one.
pub fn build(mut vocab: Map<String, Json>, merges: Vec<String>, added: &[Added], pre: Pre) -> Result<Tokenizer> {
    // tokenizers gives an added token the id its content has in the vocabulary, else the next free
    // one, whatever id the spec names: so each is in the vocabulary at its own id.
    for a in added {
        vocab.entry(a.content.clone()).or_insert(json!(a.id));
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    let added: Vec<Json> = added
        .iter()
        .map(|a| json!({"id": a.id, "content": a.content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": a.special}))
        .collect();
    let spec = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        // Qwen2's tokenizer.json normalizes to NFC; llama.cpp skips it (the same on NFC text).
        "normalizer": if pre == Pre::Decoder { json!({"type": "NFC"}) } else { Json::Null },
        "pre_tokenizer": pre.pre_tokenizer(),
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
    });
    spec.to_string().parse().map_err(|e| LabError::input(format!("the tokenizer does not build: {e}")))
}

/// GPT-2's printable stand-ins for the 256 bytes, in the order byte-level vocabularies number them
/// (the printable bytes first, then the rest mapped above U+0100).
pub fn byte_alphabet() -> Vec<char> {
    let printable = |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
    let mut order: Vec<char> = (0..256u32).filter(|&b| printable(b)).filter_map(char::from_u32).collect();
    let mut n = 0;
    for b in 0..256u32 {
        if !printable(b) {
            order.push(char::from_u32(256 + n).unwrap_or('?'));
            n += 1;
        }
    }
    order
}

const QWEN25_MERGES_GZ: &[u8] = include_bytes!("../../../data/tokenizer/qwen2.5-merges.txt.gz");

/// Qwen2.5's added tokens from id 151,643: the first 14 special, the tool and fill-in-the-middle
/// tokens not (as its tokenizer.json has them).
pub const QWEN25_ADDED: [&str; 22] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
];
pub const QWEN25_FIRST_ADDED: u32 = 151_643;

/// The Qwen2 / Qwen2.5 tokenizer: 151,643 BPE tokens (256 bytes, then one per merge) and 22 added.
pub fn qwen25() -> Result<Tokenizer> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(QWEN25_MERGES_GZ)
        .read_to_string(&mut text)
        .map_err(|e| LabError::other(format!("the shipped Qwen2.5 merges do not decompress: {e}")))?;
    let merges: Vec<String> = text.lines().map(str::to_string).collect();
    let mut vocab = Map::new();
    for (id, c) in byte_alphabet().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    for (i, m) in merges.iter().enumerate() {
        vocab.insert(m.replacen(' ', "", 1), json!(256 + i));
    }
    if vocab.len() as u32 != QWEN25_FIRST_ADDED {
        return Err(LabError::other(format!(
            "the shipped Qwen2.5 merges give {} tokens, not {QWEN25_FIRST_ADDED}",
            vocab.len()
        )));
    }
    let added: Vec<Added> = QWEN25_ADDED
        .iter()
        .enumerate()
        .map(|(i, c)| Added { id: QWEN25_FIRST_ADDED + i as u32, content: c.to_string(), special: i < 14 })
        .collect();
    build(vocab, merges, &added, Pre::Decoder)
}

/// The shipped tokenizer for a model whose vocabulary holds Qwen2.5's ids (every Qwen2.5 preset),
/// None for one that does not (the tiny model).
pub fn for_vocab(vocab_size: usize) -> Result<Option<Tokenizer>> {
    if vocab_size < QWEN25_FIRST_ADDED as usize + QWEN25_ADDED.len() {
        return Ok(None);
    }
    qwen25().map(Some)
}
