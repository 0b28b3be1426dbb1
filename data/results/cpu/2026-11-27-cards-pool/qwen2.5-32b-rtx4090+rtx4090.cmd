vram-lab plan --model synthetic:qwen2.5-32b --cards rtx4090,rtx4090
