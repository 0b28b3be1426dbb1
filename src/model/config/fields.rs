//! The config.json fields the lab takes, and the first one it does not implement, named: a
//! field silently ignored would compute or price another model.

use crate::model::config::family::Family;

/// The config.json fields the lab reads or that change nothing it computes (training-only
/// settings, bookkeeping). Any other field is refused by name: a model that sets something the
/// lab does not implement would compute or price something else without a word.
const KNOWN_FIELDS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "hidden_act",
    "bos_token_id",
    "eos_token_id",
    "torch_dtype",
    "dtype",
    "head_dim",
    "model_type",
    "rope_scaling",
    "sliding_window",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    // checked below: only their off or default values are taken
    "rope_parameters",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "use_mrope",
    "quantization_config",
    "attention_bias",
    "mlp_bias",
    "decoder_sparse_step",
    "mlp_only_layers",
    "output_router_logits",
    // nothing the lab computes depends on these: dropout, initialisation and the router's losses
    // act in training only; Llama's `pretraining_tp` slices the same products
    "architectures",
    "attention_dropout",
    "initializer_range",
    "transformers_version",
    "use_cache",
    "pad_token_id",
    "_name_or_path",
    "pretraining_tp",
    "router_aux_loss_coef",
    "router_jitter_noise",
    // Gemma 3 (gemma3_text): its pattern and activation are read; its attention's query scale
    // and its windowed layers' RoPE base change no byte; its soft-capping is checked below
    "sliding_window_pattern",
    "hidden_activation",
    "query_pre_attn_scalar",
    "rope_local_base_freq",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "cache_implementation",
    // gpt-oss (gpt_oss): `experts_per_token` repeats num_experts_per_tok, `initial_context_length`
    // is YaRN's original length; both checked below, like its `swiglu_limit`
    "experts_per_token",
    "initial_context_length",
    "swiglu_limit",
];

/// The first field of `obj` the lab does not implement for `family`, as a sentence naming it.
pub(super) fn unimplemented_field(
    family: Family,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> std::result::Result<(), String> {
    use serde_json::Value;
    let off = |k: &str| matches!(obj.get(k), None | Some(Value::Null) | Some(Value::Bool(false)));
    let name = family.name();
    if let Some(k) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(format!("field `{}` is not one the lab implements for {name}", k.escape_debug()));
    }
    if let Some(r) = obj.get("rope_scaling").filter(|r| !r.is_null()) {
        let kind = r.get("rope_type").or_else(|| r.get("type")).and_then(|t| t.as_str()).unwrap_or("");
        // Gemma 3's linear scaling of its global layers and gpt-oss's YaRN move no byte llama.cpp
        // allocates: taken for those families, which only llama.cpp's pricing reads.
        let taken = (kind == "llama3" && family == Family::Llama)
            || (kind == "linear" && family == Family::Gemma3)
            || (kind == "yarn" && family == Family::GptOss);
        if !taken {
            return Err(format!("`rope_scaling` = {r} is set: the lab computes plain RoPE, and Llama 3.1's llama3 scaling for llama (no YaRN, linear or dynamic scaling)"));
        }
    }
    if let Some(p) = obj.get("rope_parameters").filter(|p| !p.is_null()) {
        let plain = p.as_object().is_some_and(|m| {
            m.keys().all(|k| k == "rope_theta" || k == "rope_type") && m.get("rope_type").is_none_or(|t| t == "default")
        });
        if !plain {
            return Err(format!("`rope_parameters` = {p} asks for more than plain RoPE (rope_type default and rope_theta): the lab computes plain RoPE"));
        }
    }
    // Qwen2 and Qwen3 write a window they do not use unless use_sliding_window is on.
    if !off("use_sliding_window") {
        return Err(
            "`use_sliding_window` is on: the lab computes full attention in every layer (no sliding window)".into()
        );
    }
    let windowed = matches!(family, Family::Gemma3 | Family::GptOss);
    if let Some(types) = obj.get("layer_types").filter(|t| !t.is_null() && !windowed) {
        if !types.as_array().is_some_and(|a| a.iter().all(|t| t == "full_attention")) {
            return Err("`layer_types` names a layer that is not full_attention: the lab computes full attention in every layer".into());
        }
    }
    if !off("use_mrope") {
        return Err("`use_mrope` is on: the lab computes one-dimensional RoPE (no multimodal RoPE)".into());
    }
    // gpt-oss ships its experts in MXFP4: the config describes the same model, which llama.cpp
    // runs from a GGUF whose types the file decides (the lab reads no MXFP4 safetensors).
    let mxfp4 = family == Family::GptOss
        && obj.get("quantization_config").and_then(|q| q.get("quant_method")).is_some_and(|m| m == "mxfp4");
    if !off("quantization_config") && !mxfp4 {
        return Err("`quantization_config` is set: the lab reads F32, F16 and BF16 checkpoints (GPTQ, AWQ and bitsandbytes weights are not priced or computed; use a GGUF)".into());
    }
    // transformers' Qwen2 biases q, k and v whatever the field says; gpt-oss biases every
    // projection (llama.cpp requires the biases); the others bias nothing.
    if !matches!(family, Family::Qwen2 | Family::GptOss) && !off("attention_bias") {
        return Err(format!("`attention_bias` is on: the lab's {name} has no bias in attention"));
    }
    if family == Family::GptOss {
        if obj.get("attention_bias").is_some_and(|b| b == false) {
            return Err("`attention_bias` is off: llama.cpp's gpt-oss has biases in attention".into());
        }
        // llama.cpp's swiglu_oai clamps at 7 whatever the file says (LLM_FFN_SWIGLU_OAI_MOE).
        if obj.get("swiglu_limit").is_some_and(|v| v.as_f64() != Some(7.0)) {
            return Err("`swiglu_limit` is not 7.0: llama.cpp's gpt-oss clamps its experts at 7".into());
        }
        if let (Some(a), Some(b)) = (obj.get("experts_per_token"), obj.get("num_experts_per_tok")) {
            if a != b {
                return Err(format!("`experts_per_token` = {a} and `num_experts_per_tok` = {b} disagree"));
            }
        }
    } else if let Some(k) =
        ["experts_per_token", "initial_context_length", "swiglu_limit"].into_iter().find(|k| obj.contains_key(*k))
    {
        return Err(format!("field `{k}` is gpt-oss's (gpt_oss), not one the lab implements for {name}"));
    }
    for k in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if !off(k) {
            return Err(format!("`{k}` is set: llama.cpp's Gemma 3 graph as the lab prices it has no soft-capping"));
        }
    }
    if family != Family::Gemma3 {
        if let Some(k) =
            ["sliding_window_pattern", "hidden_activation", "query_pre_attn_scalar", "rope_local_base_freq"]
                .into_iter()
                .find(|k| obj.contains_key(*k))
        {
            return Err(format!("field `{k}` is Gemma 3's (gemma3_text), not one the lab implements for {name}"));
        }
    }
    if !off("mlp_bias") {
        return Err("`mlp_bias` is on: the lab's MLP has no bias".into());
    }
    if !off("output_router_logits") {
        return Err("`output_router_logits` is on: the lab returns the logits only".into());
    }
    if obj.get("decoder_sparse_step").is_some_and(|v| v.as_u64() != Some(1)) {
        return Err("`decoder_sparse_step` is not 1: the lab prices a mixture of experts in every layer".into());
    }
    if obj.get("mlp_only_layers").is_some_and(|v| !v.as_array().is_some_and(|a| a.is_empty())) {
        return Err("`mlp_only_layers` names dense layers: the lab prices a mixture of experts in every layer".into());
    }
    let counted = obj.contains_key("num_experts") || obj.contains_key("num_local_experts");
    if family.is_moe() && !counted {
        return Err(format!("{name} needs a count of experts (`num_experts` or `num_local_experts`)"));
    }
    if !family.is_moe() && counted {
        return Err(format!("`num_experts` marks a mixture of experts, and {name} is dense (model_type qwen3_moe or mixtral for a mixture)"));
    }
    if family == Family::Qwen3Moe && !obj.contains_key("moe_intermediate_size") {
        return Err("qwen3_moe needs `moe_intermediate_size` (one expert's width)".into());
    }
    Ok(())
}
