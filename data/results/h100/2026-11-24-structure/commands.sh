export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: mkdir -p /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz && /tmp/gt/gpu_kernels --test-threads=1 && /tmp/gt/gpu_context --test-threads=1"
mkdir -p /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz && /tmp/gt/gpu_kernels --test-threads=1 && /tmp/gt/gpu_context --test-threads=1 > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) stage1: vram-lab anatomy --card rtx4090 --quiet --out /tmp/results/stage1"
/tmp/vram-lab anatomy --card rtx4090 --quiet --out /tmp/results/stage1 > /tmp/results/stage1.stdout.txt 2>&1; echo "### stage1 exit $?"
echo "### $(date -u +%H:%M:%S) frag: vram-lab frag --card rtx4090 --quiet --out /tmp/results/frag"
/tmp/vram-lab frag --card rtx4090 --quiet --out /tmp/results/frag > /tmp/results/frag.stdout.txt 2>&1; echo "### frag exit $?"
echo "### $(date -u +%H:%M:%S) stage2-f32: vram-lab kv --card rtx4090 --precisions q4_k_m --compute f32 --sweeps prefill --logits last --quiet --out /tmp/results/stage2-f32"
/tmp/vram-lab kv --card rtx4090 --precisions q4_k_m --compute f32 --sweeps prefill --logits last --quiet --out /tmp/results/stage2-f32 > /tmp/results/stage2-f32.stdout.txt 2>&1; echo "### stage2-f32 exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions q4,q4_k_m --variants fused,graph,own --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions q4,q4_k_m --variants fused,graph,own --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
