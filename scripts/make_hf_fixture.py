"""Writes a tiny Qwen2 checkpoint the way HF transformers saves one (config.json, model.safetensors,
tokenizer.json) and the greedy tokens transformers generates from it in float32, so `cargo test`
can check that the lab's loader and forward pass produce the same tokens.

Runs where torch + transformers + tokenizers are installed (the GPU machine):
    python3 scripts/make_hf_fixture.py OUT_DIR
"""
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, DecoderConfig, Qwen2ForCausalLM
import transformers

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

corpus = [
    "显存管理是高性能计算的核心," * 4,
    "GPU memory of LLM inference, taken apart byte by byte.",
    "The KV cache grows with every token; weights stay fixed.",
    "人工智能在科学研究中的应用前景非常广阔,",
] * 50
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]))
tok.save(str(out / "tokenizer.json"))
vocab = tok.get_vocab_size()

torch.manual_seed(0)
cfg = DecoderConfig(
    vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=0,
)
model = Qwen2ForCausalLM(cfg).to(torch.float32).eval()
with torch.no_grad():
    for p in model.parameters():  # larger than the init's std so greedy tokens vary
        p.normal_(0.0, 0.2)
model.save_pretrained(out, safe_serialization=True)

prompt = "显存管理是高性能计算的核心, and the KV cache grows with every token."
fast = PreTrainedTokenizerFast(tokenizer_object=tok)
ids = fast(prompt, add_special_tokens=False)["input_ids"]
result = {"prompt": prompt, "prompt_ids": ids, "transformers": transformers.__version__, "torch": torch.__version__}
with torch.no_grad():  # float32 logits of the prompt's last position
    result["last_logits_cpu"] = model(torch.tensor([ids])).logits[0, -1].tolist()
for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    m = model.to(device)
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        g = m.generate(x, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0,
                       min_new_tokens=24)
    result[f"generated_ids_{device}"] = g[0, len(ids):].tolist()
(out / "expected.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result))
