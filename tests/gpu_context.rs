//! Bad input leaves the GPU usable: in one process, a generation asked with a token id past the
//! vocabulary is refused on the host (on a GPU the embedding kernel's device-side assert would
//! poison the CUDA context for every later call), and the good generation after it runs; an
//! out-of-memory likewise leaves the context usable. Built only with `--features cuda`; the GPU
//! machine runs the test binary (`cargo test --release --features cuda --test gpu_context
//! --no-run`, then the binary with `--nocapture`).
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use vram_lab::error::LabError;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::{self, GenerateConfig, ModelSource, Precision, SourceOptions};

fn gpu() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(_) => {
            eprintln!("no CUDA device: skipped");
            None
        }
    }
}

#[test]
fn a_bad_id_then_a_good_one_in_one_process() {
    let Some(dev) = gpu() else { return };
    let probe = MemoryProbe::new(&dev);
    let source = ModelSource::parse("synthetic:qwen2.5-0.5b").unwrap();
    let lm = model::source::load(
        &source,
        &SourceOptions { seed: 1, ..Default::default() },
        Precision::Bf16,
        &dev,
        &probe,
        None,
    )
    .unwrap();
    let cfg = GenerateConfig { max_new_tokens: 8, ..Default::default() };
    let vocab = lm.model.cfg.vocab_size;

    let bad = model::generate(&lm.model, &[999_999_999, 5], &cfg).unwrap_err();
    println!("bad id: {bad}");
    assert!(matches!(bad, LabError::TokenOutOfVocab { id: 999_999_999, .. }), "{bad}");
    // The vocabulary's size is the first id past it.
    assert!(matches!(model::generate(&lm.model, &[vocab as u32], &cfg), Err(LabError::TokenOutOfVocab { .. })));

    let good = model::generate(&lm.model, &[1, 2, 3, 4], &cfg).unwrap();
    println!("good ids after it: {:?}", good.generated_ids);
    assert_eq!(good.generated_ids.len(), 8);
    assert!(good.generated_ids.iter().all(|&id| (id as usize) < vocab));
    // The same ids again: greedy decoding on a healthy context repeats itself.
    assert_eq!(model::generate(&lm.model, &[1, 2, 3, 4], &cfg).unwrap().generated_ids, good.generated_ids);
}

#[test]
fn an_oom_then_a_good_allocation_in_one_process() {
    let Some(dev) = gpu() else { return };
    // More than any GPU holds: the driver refuses it and the lab reports an OOM value.
    let huge = Tensor::zeros((1usize << 40,), DType::U8, &dev).map_err(LabError::from);
    println!("huge: {:?}", huge.as_ref().err().map(|e| e.to_string()));
    assert!(matches!(huge, Err(LabError::Oom(_))));
    let small = Tensor::ones((1024, 1024), DType::F32, &dev).unwrap();
    assert_eq!(small.sum_all().unwrap().to_scalar::<f32>().unwrap(), 1024.0 * 1024.0);
}

/// The command's own path (`vram-lab generate`, less the argument parsing), twice in one process:
/// the bad id is refused in the lab's words, the good prompt then generates.
#[test]
fn the_generate_command_refuses_then_runs() {
    if gpu().is_none() {
        return;
    }
    use vram_lab::commands::{generate, GenerateArgs};
    use vram_lab::session::SessionArgs;
    let args =
        SessionArgs { device: "cuda".into(), model: Some("synthetic:qwen2.5-0.5b".into()), ..Default::default() };
    let g = |ids: Vec<u32>| GenerateArgs {
        precision: Precision::Bf16,
        prompt: String::new(),
        prompt_ids: Some(ids),
        max_new_tokens: 4,
        temperature: None,
        top_p: None,
        stop_at_eos: false,
        json: true,
        raw: false,
    };
    let bad = generate(&args, &g(vec![999_999_999, 5])).unwrap_err();
    println!("generate --prompt-ids 999999999,5: error: {bad}");
    assert_eq!(bad.to_string(), "token id 999999999 is outside the vocabulary (151,936 tokens)");
    let good = generate(&args, &g(vec![1, 2, 3, 4])).unwrap();
    println!("generate --prompt-ids 1,2,3,4: {good}");
    let json: serde_json::Value = serde_json::from_str(&good).unwrap();
    assert_eq!(json["generated_ids"].as_array().unwrap().len(), 4);
}
