export R=/tmp/results
echo "### $(date -u +%H:%M:%S) kernels: mkdir -p /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz && /tmp/gt/gpu_kernels --test-threads=1"
mkdir -p /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz && /tmp/gt/gpu_kernels --test-threads=1 > /tmp/results/kernels.stdout.txt 2>&1; echo "### kernels exit $?"
echo "### $(date -u +%H:%M:%S) bench: vram-lab bench --precisions bf16,q4_k_m --variants graph,own --quiet --out /tmp/results/bench"
/tmp/vram-lab bench --precisions bf16,q4_k_m --variants graph,own --quiet --out /tmp/results/bench > /tmp/results/bench.stdout.txt 2>&1; echo "### bench exit $?"
touch /tmp/results/done
