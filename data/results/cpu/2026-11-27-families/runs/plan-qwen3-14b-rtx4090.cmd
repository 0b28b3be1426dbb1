vram-lab plan --device cpu --model synthetic:qwen3-14b --card rtx4090
