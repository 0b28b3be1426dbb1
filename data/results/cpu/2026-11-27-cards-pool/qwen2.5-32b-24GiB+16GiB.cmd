vram-lab plan --model synthetic:qwen2.5-32b --cards 24GiB,16GiB
