//! Several GPUs of one host: a pipeline whose stages sit on two GPUs computes what the whole model
//! computes on one, to the bit (the hidden state handed on between them, the copy synchronised:
//! `model::qwen2::crossing`). Built only with `--features cuda`; the GPU machine runs the test
//! binary (`cargo test --release --features nccl --test gpu_parallel --no-run`, then the binary).
//! With fewer than two GPUs it says so and passes.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use vram_lab::estimate::parallel::pipeline_split;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::parallel::pipeline::load_pipeline;
use vram_lab::model::weights::{load_all, Synthetic};
use vram_lab::model::{generate, GenerateConfig, Logits, Precision, Qwen2, Qwen2Config};

fn two_gpus() -> Option<(Device, Device)> {
    match (vram_lab::hw::pick("cuda:0"), vram_lab::hw::pick("cuda:1")) {
        (Ok(a), Ok(b)) if a.is_cuda() && b.is_cuda() => Some((a, b)),
        _ => {
            eprintln!("fewer than two CUDA devices: skipped");
            None
        }
    }
}

#[test]
fn a_pipeline_over_two_gpus_equals_one_gpu() {
    let Some((a, b)) = two_gpus() else { return };
    let cfg = Qwen2Config::preset("qwen2.5-0.5b").unwrap();
    for precision in [Precision::F32, Precision::Bf16] {
        let whole_w = load_all(&cfg, &mut Synthetic::new(cfg.clone(), 9), precision, &a, None, |_, _| Ok(())).unwrap();
        let whole = Qwen2::new(&cfg, precision, whole_w, &a).unwrap();
        let split = pipeline_split(cfg.num_hidden_layers, 1, 1, 1, 2).unwrap();
        let devices = vec![a.clone(), b.clone()];
        let probes: Vec<_> = devices.iter().map(MemoryProbe::new).collect();
        let piped = load_pipeline(&cfg, precision, &mut Synthetic::new(cfg.clone(), 9), &devices, &split, &probes).unwrap();
        let prompt: Vec<u32> = (0..96u32).map(|i| (i * 7919) % cfg.vocab_size as u32).collect();
        let ids = Tensor::new(prompt.as_slice(), &a).unwrap().unsqueeze(0).unwrap();
        let run = |m: &Qwen2| m.forward(&ids, &mut m.new_cache(1, 128).unwrap(), Logits::All).unwrap().remove(0).to_device(&Device::Cpu).unwrap();
        let diff = (run(&piped) - run(&whole)).unwrap().abs().unwrap().max_all().unwrap().to_dtype(candle_core::DType::F32).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(diff, 0.0, "{precision}: the stages computed something else");
        let gen = GenerateConfig { max_new_tokens: 32, ..Default::default() };
        let want = generate(&whole.into_rank(std::sync::Arc::new(vram_lab::model::parallel::ThreadComm::group(1).remove(0))), &prompt, &gen).unwrap().generated_ids;
        let got = generate(&piped, &prompt, &gen).unwrap().generated_ids;
        assert_eq!(got, want, "{precision}: greedy tokens");
        println!("{precision}: logits equal, {} tokens equal", got.len());
    }
}
