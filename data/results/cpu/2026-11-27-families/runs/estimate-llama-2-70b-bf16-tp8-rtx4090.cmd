vram-lab estimate --device cpu --model synthetic:llama-2-70b --precisions bf16 --tp 8 --card rtx4090
