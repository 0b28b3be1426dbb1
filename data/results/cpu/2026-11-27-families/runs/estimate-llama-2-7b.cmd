vram-lab estimate --device cpu --model data/results/cpu/2026-11-27-families/configs/llama-2-7b --precisions bf16,q4_k_m --card rtx4090
