vram-lab estimate --device cpu --model synthetic:llama-2-70b --precisions q4_k_m --pp 2 --card rtx4090
