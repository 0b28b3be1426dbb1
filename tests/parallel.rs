//! Tensor parallelism emulated on the CPU: ranks as threads exchanging tensors give the 1-rank
//! model's logits and greedy tokens, and each rank holds the bytes its ledger says.

mod common;

use candle_core::{Device, Tensor};
use common::{max_abs, max_abs_diff, tensors, tiny};
use std::collections::HashMap;
use std::sync::Arc;
use vram_lab::model::parallel::{rank_ledger, rank_model, AllReduce, ThreadComm};
use vram_lab::model::weights::Weight;
use vram_lab::model::{generate, GenerateConfig, Logits, Precision, Qwen2};

fn weights(seed: u64) -> HashMap<String, Weight> {
    tensors(&tiny(), seed).into_iter().map(|(k, v)| (k, Weight::Dense(v))).collect()
}

/// Each rank's all-position logits for `prompt`, its greedy tokens and its weight bytes.
fn run_ranks(ranks: usize, prompt: &[u32]) -> Vec<(Tensor, Vec<u32>, u64)> {
    let cfg = tiny();
    std::thread::scope(|s| {
        let hs: Vec<_> = ThreadComm::group(ranks)
            .into_iter()
            .map(|comm| {
                let cfg = cfg.clone();
                s.spawn(move || {
                    let comm: Arc<dyn AllReduce> = Arc::new(comm);
                    let model = rank_model(&cfg, Precision::F32, weights(11), &Device::Cpu, comm).unwrap();
                    let mut cache = model.new_cache(1, 64).unwrap();
                    let ids = Tensor::new(prompt, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
                    let logits = model.forward(&ids, &mut cache, Logits::All).unwrap().remove(0);
                    let gen = generate(&model, prompt, &GenerateConfig { max_new_tokens: 12, ..Default::default() }).unwrap();
                    (logits, gen.generated_ids, model.weight_bytes())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn two_ranks_on_threads_give_the_one_rank_logits_and_tokens() {
    let prompt = [5u32, 17, 300, 42, 7, 900, 12];
    let whole = Qwen2::new(&tiny(), Precision::F32, weights(11), &Device::Cpu).unwrap();
    let mut cache = whole.new_cache(1, 64).unwrap();
    let ids = Tensor::new(&prompt[..], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let want = whole.forward(&ids, &mut cache, Logits::All).unwrap().remove(0);
    let want_tokens = generate(&whole, &prompt, &GenerateConfig { max_new_tokens: 12, ..Default::default() }).unwrap().generated_ids;
    for ranks in [1, 2] {
        let out = run_ranks(ranks, &prompt);
        for (rank, (logits, tokens, _)) in out.iter().enumerate() {
            // The partial sums are added in another order than one product's: F32 rounding only.
            let diff = max_abs_diff(logits, &want);
            assert!(diff <= 1e-5 * max_abs(&want).max(1.0), "{ranks} ranks, rank {rank}: max |Δ| {diff}");
            assert_eq!(tokens, &want_tokens, "{ranks} ranks, rank {rank}");
        }
        // Every rank holds the same bits: the sum is made in one order on each.
        assert_eq!(max_abs_diff(&out[0].0, &out[ranks - 1].0), 0.0);
    }
}

#[test]
fn each_rank_holds_its_ledgers_weights() {
    let cfg = tiny();
    let out = run_ranks(2, &[1, 2, 3]);
    let ledger = rank_ledger(&cfg, 2, 4, 0, 4).unwrap();
    for (_, _, bytes) in &out {
        assert_eq!(*bytes, ledger.weights());
    }
    // Sharded halves plus what every rank keeps whole.
    let one = rank_ledger(&cfg, 1, 4, 0, 4).unwrap();
    assert_eq!(2 * ledger.sharded, one.sharded);
    assert_eq!(ledger.replicated, one.replicated);
}
