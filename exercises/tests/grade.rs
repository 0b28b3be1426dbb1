//! 评分:每个练习一个测试,在学生看不到的配置上把学生的函数和实验室的函数逐一比较。
//! The grader: one test per exercise, comparing the student's function with the lab's on configs
//! the student does not see: the lab's presets, and models, cards and batches drawn from a seeded
//! generator (splitmix64). `EXERCISES_SEED=<number>` draws another set (a TA's own); the default
//! seed is fixed, so a run is repeatable.
//!
//! A failure names the exercise, the inputs and both values. An exercise still at `todo!()`
//! fails its test with the panic "not yet implemented: 练习 N / exercise N".

mod hidden;

use hidden::{act_bytes, assert_varied, models, shape, Rng, PRECISIONS, RANDOM_MODELS};
use vram_lab::estimate::training::{self, Optimizer, TrainSetup, TrainShape};
use vram_lab::estimate::{self, Workload};
use vram_lab::model::{DecoderConfig, Logits};

#[test]
fn exercise_1_param_count() {
    for (name, cfg) in models(1, RANDOM_MODELS) {
        let s = shape(&cfg);
        let student = exercises::param_count(s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.tied);
        let lab = cfg.param_count() as u64;
        assert_eq!(
            student, lab,
            "练习 1 / exercise 1, {name}: param_count({}, {}, {}, {}, {}, {}, {})",
            s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.tied
        );
    }
}

#[test]
fn exercise_2_decode_ceiling() {
    let mut rng = Rng::new(2);
    for (name, cfg) in models(2, RANDOM_MODELS) {
        let p = rng.pick(&PRECISIONS);
        let (bw, context, batch) =
            (rng.range(100, 8_000) as f64 * 1.25, rng.range(0, 131_072), rng.pick(&[1u64, 1, 2, 4, 8, 16, 64]));
        let weights = estimate::weight_bytes(&cfg, p);
        let table = estimate::with_layers(&cfg, 0)
            .tensor_specs()
            .into_iter()
            .find(|t| t.name == "model.embed_tokens.weight")
            .expect("an embedding");
        let embedding = p.held(&cfg, &table).bytes(table.elem_count());
        let kv = estimate::kv_bytes_per_token(&cfg, act_bytes(p) as usize);
        let student =
            exercises::decode_ceiling_tok_s(bw, weights, embedding, cfg.tie_word_embeddings, kv, context, batch);
        let read = estimate::decode_read_bytes(&cfg, p, context as usize, batch as usize);
        let lab = batch as f64 * estimate::decode_ceiling_tok_s(bw, read);
        assert!(
            (student - lab).abs() <= 1e-9 * lab,
            "练习 2 / exercise 2, {name} {p}: decode_ceiling_tok_s({bw}, {weights}, {embedding}, {}, {kv}, {context}, {batch}) = {student}, the lab's {lab}",
            cfg.tie_word_embeddings
        );
    }
}

#[test]
fn exercise_3_kv_bytes_per_token() {
    let all = models(3, RANDOM_MODELS);
    assert_varied(&all);
    for (name, cfg) in all {
        let s = shape(&cfg);
        for bytes in [1u64, 2, 4] {
            let student = exercises::kv_bytes_per_token(s.layers, s.hidden, s.heads, s.kv_heads, bytes);
            let lab = estimate::kv_bytes_per_token(&cfg, bytes as usize);
            assert_eq!(
                student, lab,
                "练习 3 / exercise 3, {name}: kv_bytes_per_token({}, {}, {}, {}, {bytes})",
                s.layers, s.hidden, s.heads, s.kv_heads
            );
        }
    }
}

/// The lab's OOM remedy "shorter context", read from its line "<asked> → <n> tokens".
fn lab_shorter_context(cfg: &DecoderConfig, w: &Workload, capacity: u64) -> u64 {
    let remedies = estimate::remedies(cfg, w, capacity, 0.0, 1.0);
    let shorter = remedies.iter().find(|r| r.what == "shorter context").expect("the remedy \"shorter context\"");
    let n =
        shorter.change.split('→').nth(1).and_then(|t| t.trim().strip_suffix(" tokens")).and_then(|t| t.parse().ok());
    n.unwrap_or_else(|| panic!("the lab's remedy reads {:?}: not \"<asked> → <n> tokens\"", shorter.change))
}

#[test]
fn exercise_4_longest_context() {
    let mut rng = Rng::new(4);
    for (name, cfg) in models(4, 60) {
        for _ in 0..6 {
            let p = rng.pick(&PRECISIONS);
            let (batch, all) = (rng.pick(&[1u64, 1, 2, 3, 8]), rng.coin());
            let any = rng.range(1, 200_000);
            let requested = rng.pick(&[1u64, 2_048, 32_768, 131_072, any]);
            let (weights, act) = (estimate::weight_bytes(&cfg, p), act_bytes(p) as usize);
            let (kv, logits) = (estimate::kv_bytes_per_token(&cfg, act), estimate::logits_bytes_per_token(&cfg, act));
            // A card at the edge of some context (to the byte, or one byte short), or anywhere.
            let per_token = batch * (kv + if all { logits } else { 0 });
            let fixed = weights + if all { 0 } else { batch * logits };
            let edge = fixed + rng.range(0, 2 * requested) * per_token;
            let capacity = match rng.range(0, 3) {
                0 => edge,
                1 => edge - 1,
                2 => rng.range(weights / 2, 3 * weights),
                _ => weights,
            };
            let w = Workload {
                precision: p,
                seq: requested as usize,
                batch: batch as usize,
                logits: if all { Logits::All } else { Logits::Last },
            };
            let lab = lab_shorter_context(&cfg, &w, capacity);
            let student = exercises::longest_context(capacity, weights, kv, logits, batch, all, requested);
            assert_eq!(student, lab, "练习 4 / exercise 4, {name} {p}: longest_context({capacity}, {weights}, {kv}, {logits}, {batch}, {all}, {requested})");
        }
    }
}

#[test]
fn exercise_5_train_state_bytes() {
    let mut rng = Rng::new(5);
    let mut counts: Vec<u64> = models(5, RANDOM_MODELS).iter().map(|(_, c)| c.param_count() as u64).collect();
    counts.extend((0..200).map(|_| rng.range(1, 200_000_000_000)));
    for params in counts {
        for _ in 0..4 {
            let (weight_bytes, master_f32) = (rng.pick(&[4u64, 2]), rng.coin());
            let (optimizer, moment_bytes) =
                rng.pick(&[(Optimizer::Adamw, 4u64), (Optimizer::AdamwBf16, 2), (Optimizer::Sgd, 0)]);
            let any = rng.range(1, 1024);
            let (zero, gpus) = (rng.range(0, 3), rng.pick(&[1u64, 2, 3, 4, 6, 8, 16, any]));
            let setup = TrainSetup { weight_bytes, master_f32, optimizer, zero: zero as u8, gpus };
            let lab = training::ledger(params, &setup).total();
            let student = exercises::train_state_bytes(params, weight_bytes, master_f32, moment_bytes, zero, gpus);
            assert_eq!(student, lab, "练习 5 / exercise 5: train_state_bytes({params}, {weight_bytes}, {master_f32}, {moment_bytes}, {zero}, {gpus})");
        }
    }
}

#[test]
fn exercise_6_pytorch_step_peak() {
    let mut rng = Rng::new(6);
    for (name, cfg) in models(6, RANDOM_MODELS) {
        let s = shape(&cfg);
        let params = cfg.param_count() as u64;
        let states = training::ledger(params, &TrainSetup::fp32_adam());
        for checkpoint in [false, true] {
            let any = rng.range(1, 16_384);
            let (batch, seq) = (rng.pick(&[1u64, 1, 2, 4, 8]), rng.pick(&[1u64, 128, 1_024, 8_192, any]));
            let sh = TrainShape { batch: batch as usize, seq: seq as usize };
            let lab =
                states.weights + states.optimizer + training::pytorch_step(&cfg, params, sh, checkpoint).above_states();
            let student = exercises::pytorch_step_peak(
                params,
                s.layers,
                s.hidden,
                s.intermediate,
                s.heads,
                s.vocab,
                batch,
                seq,
                checkpoint,
            );
            assert_eq!(
                student, lab,
                "练习 6 / exercise 6, {name}: pytorch_step_peak({params}, {}, {}, {}, {}, {}, {batch}, {seq}, {checkpoint})",
                s.layers, s.hidden, s.intermediate, s.heads, s.vocab
            );
        }
    }
}

#[test]
fn exercise_7_tp_rank_weight_bytes() {
    let mut rng = Rng::new(7);
    let mut graded = 0;
    for (name, cfg) in models(7, RANDOM_MODELS) {
        let s = shape(&cfg);
        // Every GPU count the lab splits this model over: dividing heads, K/V heads and the MLP.
        for gpus in (1..=s.kv_heads)
            .filter(|&g| s.kv_heads.is_multiple_of(g) && s.heads.is_multiple_of(g) && s.intermediate.is_multiple_of(g))
        {
            let dtype = rng.pick(&[2u64, 4]);
            let lab = vram_lab::model::parallel::rank_ledger(&cfg, gpus as usize, dtype, 0, dtype)
                .expect("a split the lab takes")
                .weights();
            let student = exercises::tp_rank_weight_bytes(
                s.vocab,
                s.hidden,
                s.intermediate,
                s.layers,
                s.heads,
                s.kv_heads,
                s.tied,
                gpus,
                dtype,
            );
            assert_eq!(
                student, lab,
                "练习 7 / exercise 7, {name}: tp_rank_weight_bytes({}, {}, {}, {}, {}, {}, {}, {gpus}, {dtype})",
                s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.tied
            );
            graded += usize::from(gpus > 1);
        }
    }
    assert!(graded > 50, "only {graded} splits over several GPUs were graded");
}

#[test]
fn exercise_8_nccl_bytes() {
    for gpus in 0..=16u64 {
        for rank in 0..gpus.max(1) {
            let lab = estimate::parallel::nccl_bytes(gpus as usize, rank as usize);
            let student = exercises::nccl_bytes(gpus, rank);
            assert_eq!(student, lab, "练习 8 / exercise 8: nccl_bytes({gpus}, {rank})");
        }
    }
}
