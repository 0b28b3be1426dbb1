export R=/tmp/results
echo "### $(date -u +%H:%M:%S) p05f32: vram-lab kv --model synthetic:qwen2.5-0.5b --precisions f32 --sweeps prefill --logits last,all --lengths 256,512,1024,4096 --quiet --out /tmp/results/p05f32"
/tmp/vram-lab kv --model synthetic:qwen2.5-0.5b --precisions f32 --sweeps prefill --logits last,all --lengths 256,512,1024,4096 --quiet --out /tmp/results/p05f32 > /tmp/results/p05f32.stdout.txt 2>&1; echo "### p05f32 exit $?"
echo "### $(date -u +%H:%M:%S) p05bf16: vram-lab kv --model synthetic:qwen2.5-0.5b --precisions bf16 --sweeps prefill --logits last,all --lengths 256,512,1024,4096 --quiet --out /tmp/results/p05bf16"
/tmp/vram-lab kv --model synthetic:qwen2.5-0.5b --precisions bf16 --sweeps prefill --logits last,all --lengths 256,512,1024,4096 --quiet --out /tmp/results/p05bf16 > /tmp/results/p05bf16.stdout.txt 2>&1; echo "### p05bf16 exit $?"
echo "### $(date -u +%H:%M:%S) p15bf16: vram-lab kv --model synthetic:qwen2.5-1.5b --precisions bf16,q4 --sweeps prefill --logits last --lengths 1024,2048,4096,8192 --quiet --out /tmp/results/p15bf16"
/tmp/vram-lab kv --model synthetic:qwen2.5-1.5b --precisions bf16,q4 --sweeps prefill --logits last --lengths 1024,2048,4096,8192 --quiet --out /tmp/results/p15bf16 > /tmp/results/p15bf16.stdout.txt 2>&1; echo "### p15bf16 exit $?"
touch /tmp/results/done
