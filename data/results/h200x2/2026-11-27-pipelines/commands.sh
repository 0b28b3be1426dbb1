export R=/tmp/results
echo "### $(date -u +%H:%M:%S) pipeline-32b-q4km: vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-32b-q4km"
timeout 420 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-32b-q4km > /tmp/results/pipeline-32b-q4km.stdout.txt 2>&1; echo "### pipeline-32b-q4km exit $?"
echo "### $(date -u +%H:%M:%S) pipeline-72b-q4km: vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-72b-q4km"
timeout 420 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-72b-q4km > /tmp/results/pipeline-72b-q4km.stdout.txt 2>&1; echo "### pipeline-72b-q4km exit $?"
echo "### $(date -u +%H:%M:%S) pipeline-72b-q4km-3-2: vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline --split 3,2 --no-single --quiet --out /tmp/results/pipeline-72b-q4km-3-2"
timeout 420 /tmp/vram-lab parallel --model synthetic:qwen2.5-72b --precision q4_k_m --gpus 2 --layouts pipeline --split 3,2 --no-single --quiet --out /tmp/results/pipeline-72b-q4km-3-2 > /tmp/results/pipeline-72b-q4km-3-2.stdout.txt 2>&1; echo "### pipeline-72b-q4km-3-2 exit $?"
echo "### $(date -u +%H:%M:%S) pipeline-32b-q4km-f32: vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m-f32 --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-32b-q4km-f32"
timeout 420 /tmp/vram-lab parallel --model synthetic:qwen2.5-32b --precision q4_k_m-f32 --gpus 2 --layouts pipeline --quiet --out /tmp/results/pipeline-32b-q4km-f32 > /tmp/results/pipeline-32b-q4km-f32.stdout.txt 2>&1; echo "### pipeline-32b-q4km-f32 exit $?"
echo "### $(date -u +%H:%M:%S) pipeline-7b-bf16-split: vram-lab parallel --model synthetic:qwen2.5-7b --precision bf16 --gpus 2 --layouts pipeline --split 1,1 --quiet --out /tmp/results/pipeline-7b-bf16-split"
timeout 420 /tmp/vram-lab parallel --model synthetic:qwen2.5-7b --precision bf16 --gpus 2 --layouts pipeline --split 1,1 --quiet --out /tmp/results/pipeline-7b-bf16-split > /tmp/results/pipeline-7b-bf16-split.stdout.txt 2>&1; echo "### pipeline-7b-bf16-split exit $?"
touch /tmp/results/done
