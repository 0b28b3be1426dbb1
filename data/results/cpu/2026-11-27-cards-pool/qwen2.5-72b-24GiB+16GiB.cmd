vram-lab plan --model synthetic:qwen2.5-72b --cards 24GiB,16GiB
