for i in 1 2; do
/tmp/vram-lab bench --precisions q4_k_m --variants own --prompt-lens 512 --quiet --out $R/split4-$i > $R/split4-$i.txt 2>&1
VRAM_LAB_TRIAL_SPLIT1=1 /tmp/vram-lab bench --precisions q4_k_m --variants own --prompt-lens 512 --quiet --out $R/split1-$i > $R/split1-$i.txt 2>&1
done
grep "own batch 1" $R/split*.txt
