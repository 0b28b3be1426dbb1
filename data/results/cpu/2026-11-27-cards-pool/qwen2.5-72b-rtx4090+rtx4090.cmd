vram-lab plan --model synthetic:qwen2.5-72b --cards rtx4090,rtx4090
