//! 评分用的隐藏配置:实验室的预设,加上由种子生成的随机模型。
//! The grader's hidden configs: the lab's presets, and models drawn from a seeded generator
//! (splitmix64). `EXERCISES_SEED=<number>` draws another set; the default seed is fixed.

use vram_lab::model::{config::PRESETS, DecoderConfig, Family, Precision};

/// The seed unless `EXERCISES_SEED` gives another.
pub const SEED: u64 = 0x5eed_2026_0000_0041;
/// Random models per test, beside the presets.
pub const RANDOM_MODELS: usize = 120;

/// splitmix64: a small deterministic generator, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(salt: u64) -> Self {
        let seed = std::env::var("EXERCISES_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(SEED);
        Rng(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.next() as usize % from.len()]
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// A model the lab can price: heads of a usual size, K/V heads dividing the query heads, an MLP a
/// multiple of 64 wide, any vocabulary and depth, tied or not.
pub fn random_config(rng: &mut Rng) -> DecoderConfig {
    let heads = rng.pick(&[1u64, 2, 3, 4, 6, 7, 8, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64]);
    let divisors: Vec<u64> = (1..=heads).filter(|d| heads.is_multiple_of(*d)).collect();
    let kv_heads = rng.pick(&divisors);
    let head_dim = rng.pick(&[32u64, 64, 80, 96, 128, 256]);
    let hidden = heads * head_dim;
    let intermediate = 64 * rng.range(1, (hidden * 6 / 64).max(1));
    let base = DecoderConfig::preset("tiny").expect("the tiny preset");
    DecoderConfig {
        vocab_size: rng.range(1, 160_000) as usize,
        hidden_size: hidden as usize,
        intermediate_size: intermediate as usize,
        num_hidden_layers: rng.range(1, 100) as usize,
        num_attention_heads: heads as usize,
        num_key_value_heads: kv_heads as usize,
        tie_word_embeddings: rng.coin(),
        head_dim: None,
        ..base
    }
}

/// The lab's Qwen2 presets, then `RANDOM_MODELS` random ones.
pub fn models(salt: u64, random: usize) -> Vec<(String, DecoderConfig)> {
    let mut rng = Rng::new(salt);
    // The exercises' formulas are Qwen2's (q, k, v biased; q as wide as the hidden size): the
    // Qwen2 presets, not the other families'.
    let presets = PRESETS
        .iter()
        .map(|(name, _)| (name.to_string(), DecoderConfig::preset(name).expect("a preset")))
        .filter(|(_, cfg)| cfg.model_type == Family::Qwen2);
    let drawn = (0..random).map(|i| (format!("random model {i}"), random_config(&mut rng)));
    presets.chain(drawn).collect()
}

/// The shape arguments the exercises take, from a config.
pub struct Shape {
    pub vocab: u64,
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub tied: bool,
}

pub fn shape(cfg: &DecoderConfig) -> Shape {
    assert_eq!(
        cfg.head_dim(),
        cfg.hidden_size / cfg.num_attention_heads,
        "the grader's models keep head_dim = hidden / heads"
    );
    Shape {
        vocab: cfg.vocab_size as u64,
        hidden: cfg.hidden_size as u64,
        intermediate: cfg.intermediate_size as u64,
        layers: cfg.num_hidden_layers as u64,
        heads: cfg.num_attention_heads as u64,
        kv_heads: cfg.num_key_value_heads as u64,
        tied: cfg.tie_word_embeddings,
    }
}

pub const PRECISIONS: [Precision; 5] =
    [Precision::Bf16, Precision::F32, Precision::F16, Precision::Q4KM, Precision::Q4];

pub fn act_bytes(p: Precision) -> u64 {
    p.act_dtype().size_in_bytes() as u64
}

/// The hidden models vary what the formulas read, so a formula that ignores an input cannot pass
/// by luck.
pub fn assert_varied(all: &[(String, DecoderConfig)]) {
    let distinct =
        |f: fn(&DecoderConfig) -> usize| all.iter().map(|(_, c)| f(c)).collect::<std::collections::BTreeSet<_>>().len();
    assert!(
        distinct(|c| c.num_hidden_layers) > 40
            && distinct(|c| c.num_key_value_heads) > 5
            && distinct(|c| c.hidden_size) > 20
    );
    assert!(all.iter().any(|(_, c)| c.tie_word_embeddings) && all.iter().any(|(_, c)| !c.tie_word_embeddings));
    assert!(all.iter().any(|(_, c)| c.num_key_value_heads < c.num_attention_heads));
}
