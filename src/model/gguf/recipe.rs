//! llama.cpp's quantization recipes (`llama-quantize`'s file types), tensor by tensor, as
//! `src/llama-quant.cpp` decides them: the default type of the file type, promoted for the output
//! layer, for the `use_more_bits` layers' attn_v and ffn_down (Q4_K_M), for a 70B's attn_v, for an
//! 8-expert mixture's attention (Mixtral), and replaced by a fallback where a row is not a whole
//! number of blocks. A file the lab writes with a recipe holds the same types, so the same bytes,
//! as llama.cpp's.

use crate::model::gguf::types::GgmlType;

/// `llama-quantize`'s file types the lab writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
pub enum FileType {
    /// Q4_K, Q6_K for the output layer and half the layers' attn_v and ffn_down (llama.cpp's default advice)
    #[value(name = "q4_k_m", alias = "q4km")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q6_k")]
    Q6K,
    #[value(name = "bf16")]
    Bf16,
    #[value(name = "f16")]
    F16,
    #[value(name = "f32")]
    F32,
    /// MXFP4 for a mixture's experts, Q8_0 for every other matrix (gpt-oss's published GGUF)
    #[value(name = "mxfp4_moe")]
    Mxfp4Moe,
}

impl FileType {
    /// llama-quantize's name, llama.cpp's `llama_ftype` number (`general.file_type`), and the
    /// type its matrices get before the recipe promotes or replaces any.
    fn parts(self) -> (&'static str, u32, &'static str) {
        match self {
            Self::Q4KM => ("Q4_K_M", 15, "Q4_K"),
            Self::Q8_0 => ("Q8_0", 7, "Q8_0"),
            Self::Q4_0 => ("Q4_0", 2, "Q4_0"),
            Self::Q6K => ("Q6_K", 18, "Q6_K"),
            Self::Bf16 => ("BF16", 32, "BF16"),
            Self::F16 => ("F16", 1, "F16"),
            Self::F32 => ("F32", 0, "F32"),
            Self::Mxfp4Moe => ("MXFP4_MOE", 38, "Q8_0"),
        }
    }

    pub fn name(self) -> &'static str {
        self.parts().0
    }

    /// The name `--type` takes (llama-quantize's, lower case).
    pub fn cli_name(self) -> String {
        self.name().to_ascii_lowercase()
    }

    pub fn llama_ftype(self) -> u32 {
        self.parts().1
    }

    fn default_type(self) -> GgmlType {
        ty(self.parts().2)
    }
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn ty(name: &str) -> GgmlType {
    // Names from the table in types.rs (test `recipes_use_known_types`).
    GgmlType::from_name(name).unwrap_or(super::types::TYPES[0])
}

/// One tensor as the recipe sees it: its GGUF name and ggml shape (row length first).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor<'a> {
    pub name: &'a str,
    pub ne: &'a [u64],
}

/// What llama-quantize needs of the model beyond the tensors: whether it is llama.cpp's 70B size
/// class (80 layers for qwen2), whose attn_v gets more bits; its layer count, which places an
/// ffn_down among `use_more_bits`'s layers; its experts (`n_expert`: 8 gives Mixtral's attention
/// more bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelClass {
    pub is_70b: bool,
    pub layers: usize,
    pub experts: usize,
}

impl ModelClass {
    /// llama.cpp's size class that changes a recipe: 80 dense layers is its "70B".
    pub fn of(cfg: &crate::model::config::DecoderConfig) -> Self {
        let experts = cfg.experts().map_or(0, |e| e.experts);
        Self { is_70b: cfg.num_hidden_layers == 80 && experts == 0, layers: cfg.num_hidden_layers, experts }
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third between.
pub fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Whether llama-quantize quantizes the tensor at all: weights of two or more dimensions, not a
/// norm, not a mixture's router (everything else keeps the type it has in the input file).
pub fn is_quantized(name: &str, ne: &[u64]) -> bool {
    name.ends_with("weight") && ne.len() >= 2 && !name.contains("_norm.weight") && !name.contains("ffn_gate_inp.weight")
}

/// The type of every tensor under `ftype`, in the order given. `input` is the type a tensor has in
/// the input file, which the tensors the recipe leaves alone keep (norms and biases: F32 from
/// llama.cpp's converter and from the lab's writer).
pub fn plan(
    ftype: FileType,
    class: ModelClass,
    tensors: &[Tensor],
    input: impl Fn(&Tensor) -> GgmlType,
) -> Vec<GgmlType> {
    let has_output = tensors.iter().any(|t| t.name == "output.weight");
    let n_attn_v = tensors.iter().filter(|t| t.name.contains("attn_v.weight")).count() as i64;
    // llama.cpp walks the tensors in its loader's map order (`weight_name_comparer`: by layer
    // number, tensors outside the layers first, then by name); its attn_v counter counts in that
    // order. An ffn_down's layer is its index among the layers' (one a layer, experts merged).
    let layer = |n: &str| -> i64 {
        n.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|d| d.parse().ok()).unwrap_or(-1)
    };
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| (layer(tensors[a].name), tensors[a].name).cmp(&(layer(tensors[b].name), tensors[b].name)));
    let mut i_attn_v = 0i64;
    let mut out = vec![ftype.default_type(); tensors.len()];
    for k in order {
        let t = &tensors[k];
        if !is_quantized(t.name, t.ne) {
            out[k] = input(t);
            continue;
        }
        let mut more_bits = false;
        if t.name.contains("attn_v.weight") {
            more_bits = use_more_bits(i_attn_v, n_attn_v);
            i_attn_v += 1;
        } else if t.name.contains("ffn_down") {
            more_bits = use_more_bits(layer(t.name), class.layers as i64);
        }
        out[k] = tensor_type(ftype, class, t, has_output, more_bits);
    }
    out
}

/// The type of one quantized tensor (`is_quantized`) under `ftype`: `has_output` whether the file
/// has an output layer apart from the embedding, `more_bits` whether its layer is one of
/// `use_more_bits`'s (for attn_v and ffn_down).
pub fn tensor_type(ftype: FileType, class: ModelClass, t: &Tensor, has_output: bool, more_bits: bool) -> GgmlType {
    let default = ftype.default_type();
    if !default.is_block_quantized() {
        return default;
    }
    // MXFP4_MOE: the experts (three dimensions, more than one expert) in MXFP4, the rest Q8_0,
    // the output layer included.
    if ftype == FileType::Mxfp4Moe {
        return if t.ne.get(2).is_some_and(|&n| n > 1) { ty("MXFP4") } else { default };
    }
    let mut new = default;
    let nx = t.ne[0];
    if t.name == "output.weight" || (!has_output && t.name == "token_embd.weight") {
        if !nx.is_multiple_of(default.block) {
            new = ty("Q8_0");
        } else if new != ty("Q8_0") {
            new = ty("Q6_K");
        }
    } else if t.name.contains("attn_v.weight") {
        if ftype == FileType::Q4KM && more_bits {
            new = ty("Q6_K");
        }
        if class.is_70b && (new == ty("Q3_K") || new == ty("Q4_K")) {
            new = ty("Q5_K");
        }
        // "for the 8-expert model, bumping this to Q8_0 trades just ~128MB" (llama-quant.cpp).
        if class.experts == 8 {
            new = ty("Q8_0");
        }
    } else if t.name.contains("attn_k.weight") && class.experts == 8 {
        new = ty("Q8_0");
    } else if t.name.contains("attn_output.weight") && class.experts == 8 && ftype == FileType::Q4KM {
        new = ty("Q5_K");
    } else if t.name.contains("ffn_down") && ftype == FileType::Q4KM && more_bits {
        new = ty("Q6_K");
    }
    fallback(new, nx)
}

/// llama.cpp's replacement for a type whose block does not divide the row (`tensor_type_fallback`),
/// then F16 if even that does not.
fn fallback(t: GgmlType, nx: u64) -> GgmlType {
    if nx.is_multiple_of(t.block) {
        return t;
    }
    let f = match t.name {
        "Q4_K" => ty("Q5_0"),
        "Q5_K" => ty("Q5_1"),
        "Q6_K" => ty("Q8_0"),
        "Q2_K" | "Q3_K" | "TQ1_0" | "TQ2_0" => ty("Q4_0"),
        n if n.starts_with("IQ") && t.block == 256 => ty("IQ4_NL"),
        _ => t,
    };
    if nx.is_multiple_of(f.block) {
        f
    } else {
        ty("F16")
    }
}
