"""Makes data/tokenizer/qwen2.5-merges.txt.gz: the Qwen2/Qwen2.5 BPE merges the lab ships, so
synthetic presets tokenize text as Qwen2.5 does with no model hub.

    python3 scripts/make_qwen_tokenizer.py          # needs pip and PyPI, nothing else

Source: Alibaba Cloud's own SDK on PyPI, `dashscope` 2.0.2 (Apache-2.0), which ships Qwen's BPE
ranks as `dashscope/resources/qwen.tiktoken` (base64 token + rank per line). Its ranks are
Qwen2.5's vocab.json ids; merges.txt follows from them by llama.cpp's converter's algorithm (each
multi-byte token split by BPE at ranks below its own). The merges alone determine the vocabulary:
ids 0-255 are GPT-2's byte alphabet in rank order, id 256 + i the concatenation of merge i. The
result is checked against the sha256 of Qwen2.5's published merges.txt.
"""
import base64
import gzip
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "tokenizer" / "qwen2.5-merges.txt.gz"
TIKTOKEN_SHA = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
MERGES_SHA = "599bab54075088774b1733fde865d5bd747cbcc7a547c5bc12610e874e26f5e3"  # Qwen2.5's merges.txt


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merges_from_ranks(ranks):
    alphabet = bytes_to_unicode()
    text = lambda b: "".join(alphabet[x] for x in b)

    def split(token, below):
        parts = [bytes([x]) for x in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < below and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                return parts
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]

    out = []
    for token, rank in sorted(ranks.items(), key=lambda x: x[1]):
        if len(token) == 1:
            continue
        a, b = split(token, rank)
        out.append(text(a) + " " + text(b))
    return ("\n".join(out) + "\n").encode()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, "dashscope==2.0.2"], check=True)
        wheel = next(Path(tmp).glob("dashscope-2.0.2-*.whl"))
        data = zipfile.ZipFile(wheel).read("dashscope/resources/qwen.tiktoken")
    if hashlib.sha256(data).hexdigest() != TIKTOKEN_SHA:
        sys.exit("qwen.tiktoken in dashscope 2.0.2 is not the file this script was written for")
    ranks = {}
    for line in io.BytesIO(data):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    merges = merges_from_ranks(ranks)
    if hashlib.sha256(merges).hexdigest() != MERGES_SHA:
        sys.exit("the merges derived differ from Qwen2.5's merges.txt")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as z:
        z.write(merges)
    print(f"{OUT.relative_to(ROOT)}: {merges.count(10)} merges, {OUT.stat().st_size} bytes (sha256 of merges.txt {MERGES_SHA})")


if __name__ == "__main__":
    main()
