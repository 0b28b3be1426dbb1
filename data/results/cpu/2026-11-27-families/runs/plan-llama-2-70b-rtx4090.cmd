vram-lab plan --device cpu --model synthetic:llama-2-70b --card rtx4090
