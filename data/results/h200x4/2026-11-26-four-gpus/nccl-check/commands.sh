export R=/tmp/results
echo "### $(date -u +%H:%M:%S) zero1-0.5b-g3: NCCL_DEBUG_SUBSYS=ALL timeout 150 /tmp/vram-lab train --model synthetic:qwen2.5-0.5b --gpus 3 --zero 1 --seq 512 --checkpointing false --quiet --out $R/zero1-0.5b-g3"
NCCL_DEBUG_SUBSYS=ALL timeout 150 /tmp/vram-lab train --model synthetic:qwen2.5-0.5b --gpus 3 --zero 1 --seq 512 --checkpointing false --quiet --out $R/zero1-0.5b-g3 > /tmp/results/zero1-0.5b-g3.stdout.txt 2>&1; echo "### zero1-0.5b-g3 exit $?"
echo "### $(date -u +%H:%M:%S) zero1-0.5b-log: NCCL_DEBUG_SUBSYS=ALL timeout 150 /tmp/vram-lab train --model synthetic:qwen2.5-0.5b --gpus 4 --zero 1 --seq 512 --checkpointing false --quiet --out $R/zero1-0.5b-log"
NCCL_DEBUG_SUBSYS=ALL timeout 150 /tmp/vram-lab train --model synthetic:qwen2.5-0.5b --gpus 4 --zero 1 --seq 512 --checkpointing false --quiet --out $R/zero1-0.5b-log > /tmp/results/zero1-0.5b-log.stdout.txt 2>&1; echo "### zero1-0.5b-log exit $?"
echo "### $(date -u +%H:%M:%S) tp7: NCCL_DEBUG_SUBSYS=INIT,ALLOC timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus 4 --layouts tensor --quiet --out $R/tp7"
NCCL_DEBUG_SUBSYS=INIT,ALLOC timeout 150 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --gpus 4 --layouts tensor --quiet --out $R/tp7 > /tmp/results/tp7.stdout.txt 2>&1; echo "### tp7 exit $?"
echo "### $(date -u +%H:%M:%S) zero2-1.5b-g3: vram-lab train --model synthetic:qwen2.5-1.5b --gpus 3 --zero 2 --seq 512 --checkpointing false --quiet --out /tmp/results/zero2-1.5b-g3"
timeout 150 /tmp/vram-lab train --model synthetic:qwen2.5-1.5b --gpus 3 --zero 2 --seq 512 --checkpointing false --quiet --out /tmp/results/zero2-1.5b-g3 > /tmp/results/zero2-1.5b-g3.stdout.txt 2>&1; echo "### zero2-1.5b-g3 exit $?"
touch /tmp/results/done
