export R=/tmp/results
echo "### $(date -u +%H:%M:%S) p64: VRAM_LAB_FLASH_ROWS=64 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p64"
VRAM_LAB_FLASH_ROWS=64 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p64 > /tmp/results/p64.stdout.txt 2>&1; echo "### p64 exit $?"
echo "### $(date -u +%H:%M:%S) p128: VRAM_LAB_FLASH_ROWS=128 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p128"
VRAM_LAB_FLASH_ROWS=128 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p128 > /tmp/results/p128.stdout.txt 2>&1; echo "### p128 exit $?"
echo "### $(date -u +%H:%M:%S) p64b: VRAM_LAB_FLASH_ROWS=64 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p64b"
VRAM_LAB_FLASH_ROWS=64 /tmp/vram-lab bench --precisions bf16 --variants own --prompt-lens 32768 --new-tokens 16 --repeats 3 --quiet --out $R/p64b > /tmp/results/p64b.stdout.txt 2>&1; echo "### p64b exit $?"
echo "### $(date -u +%H:%M:%S) k128: VRAM_LAB_FLASH_ROWS=128 bash scripts/gpu/test_binary.sh .gpu/gpu_kernels.xz"
VRAM_LAB_FLASH_ROWS=128 bash scripts/gpu/test_binary.sh .gpu/gpu_kernels.xz > /tmp/results/k128.stdout.txt 2>&1; echo "### k128 exit $?"
echo "### $(date -u +%H:%M:%S) prof64: VRAM_LAB_FLASH_ROWS=64 OUT=$R/prof64 bash scripts/gpu/profile-prefill.sh; python3 scripts/gpu/ncu_sum.py $R/prof64/ncu.csv | head -25"
VRAM_LAB_FLASH_ROWS=64 OUT=$R/prof64 bash scripts/gpu/profile-prefill.sh; python3 scripts/gpu/ncu_sum.py $R/prof64/ncu.csv | head -25 > /tmp/results/prof64.stdout.txt 2>&1; echo "### prof64 exit $?"
echo "### $(date -u +%H:%M:%S) prof128: VRAM_LAB_FLASH_ROWS=128 OUT=$R/prof128 bash scripts/gpu/profile-prefill.sh; python3 scripts/gpu/ncu_sum.py $R/prof128/ncu.csv | head -25"
VRAM_LAB_FLASH_ROWS=128 OUT=$R/prof128 bash scripts/gpu/profile-prefill.sh; python3 scripts/gpu/ncu_sum.py $R/prof128/ncu.csv | head -25 > /tmp/results/prof128.stdout.txt 2>&1; echo "### prof128 exit $?"
touch /tmp/results/done
