"""Greedy parity of the lab's decoder with transformers on the GPU, per family (issue 42).

For each small preset (data/models/tiny*.json: Qwen2, Qwen3 with head_dim != hidden / heads, Llama
with Llama 3.1's RoPE scaling, Mistral) it writes a model folder (config.json and random F32
safetensors, seeded; norms drawn away from 1 so a q norm applied to k shows), runs transformers'
greedy generation on the GPU and `vram-lab generate --json` on the same folder, in F32 and BF16,
and writes one JSON line per (model, dtype) with both token lists.
    python3 scripts/reference/families_parity.py LAB_BINARY OUT.jsonl
"""
import json
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

PRESETS = ["tiny", "tiny-qwen3", "tiny-llama", "tiny-mistral"]
PROMPT = [5, 17, 301, 44, 9, 610, 2, 77, 123, 8]
NEW = 12


def tensors(cfg):
    """Every weight as the HF checkpoint names it (model::config::layout's order)."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or h // heads
    family = cfg.get("model_type", "qwen2")
    out = {"model.embed_tokens.weight": [v, h]}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}"
        out[f"{p}.self_attn.q_proj.weight"] = [heads * d, h]
        out[f"{p}.self_attn.k_proj.weight"] = [kv_heads * d, h]
        out[f"{p}.self_attn.v_proj.weight"] = [kv_heads * d, h]
        if family == "qwen2":
            out[f"{p}.self_attn.q_proj.bias"] = [heads * d]
            out[f"{p}.self_attn.k_proj.bias"] = [kv_heads * d]
            out[f"{p}.self_attn.v_proj.bias"] = [kv_heads * d]
        out[f"{p}.self_attn.o_proj.weight"] = [h, heads * d]
        if family == "qwen3":
            out[f"{p}.self_attn.q_norm.weight"] = [d]
            out[f"{p}.self_attn.k_norm.weight"] = [d]
        out[f"{p}.mlp.gate_proj.weight"] = [i, h]
        out[f"{p}.mlp.up_proj.weight"] = [i, h]
        out[f"{p}.mlp.down_proj.weight"] = [h, i]
        out[f"{p}.input_layernorm.weight"] = [h]
        out[f"{p}.post_attention_layernorm.weight"] = [h]
    out["model.norm.weight"] = [h]
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [v, h]
    return out


def write_model(preset, folder):
    cfg = json.load(open(f"data/models/{preset}.json"))
    g = torch.Generator().manual_seed(7)
    w = {}
    for name, shape in tensors(cfg).items():
        if name.endswith("norm.weight"):
            w[name] = 1.0 + 0.4 * (torch.rand(shape, generator=g) - 0.5)
        else:
            w[name] = 0.05 * torch.randn(shape, generator=g)
    save_file(w, f"{folder}/model.safetensors", metadata={"format": "pt"})
    json.dump(cfg, open(f"{folder}/config.json", "w"))


def hf_tokens(folder, dtype):
    m = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype).to("cuda").eval()
    ids = torch.tensor([PROMPT], device="cuda")
    # Greedy through every step: no end-of-sequence stop (the lab runs --max-new-tokens without
    # --stop-at-eos), and no token suppressed.
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = m.generate(ids, max_new_tokens=NEW, do_sample=False)
    return out[0, len(PROMPT):].tolist()


def lab_tokens(lab, folder, precision):
    r = subprocess.run(
        [lab, "generate", "--model", folder, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", str(NEW),
         "--precision", precision, "--json", "--quiet"],
        capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr)[-400:]
    line = [l for l in r.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["generated_ids"], ""


def main():
    lab, out = sys.argv[1], open(sys.argv[2], "w")
    for preset in PRESETS:
        with tempfile.TemporaryDirectory() as folder:
            write_model(preset, folder)
            for precision, dtype in [("f32", torch.float32), ("bf16", torch.bfloat16)]:
                hf = hf_tokens(folder, dtype)
                lab_ids, err = lab_tokens(lab, folder, precision)
                same = 0
                if lab_ids is not None:
                    while same < min(len(hf), len(lab_ids)) and hf[same] == lab_ids[same]:
                        same += 1
                rec = {"model": preset, "precision": precision, "transformers": hf, "lab": lab_ids,
                       "equal": lab_ids == hf, "same_prefix": same, "error": err,
                       "torch": torch.__version__, "transformers_version": __import__("transformers").__version__}
                print(json.dumps(rec), flush=True)
                out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
