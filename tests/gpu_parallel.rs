//! Several GPUs of one host: a pipeline whose stages sit on two GPUs computes what the whole model
//! computes on one, to the bit (the hidden state handed on between them, the copy synchronised:
//! `model::decoder::crossing`). Built only with `--features cuda`; the GPU machine runs the test
//! binary (`cargo test --release --features nccl --test gpu_parallel --no-run`, then the binary).
//! With fewer than two GPUs it says so and passes; with more, one test takes every GPU as a stage.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use vram_lab::estimate::parallel::pipeline_split;
use vram_lab::memory::MemoryProbe;
use vram_lab::model::load::synthetic::Synthetic;
use vram_lab::model::load::weights::load_all;
use vram_lab::model::parallel::pipeline::{load_pipeline, Ends};
use vram_lab::model::{generate, Decoder, DecoderConfig, GenerateConfig, Logits, Precision};

fn two_gpus() -> Option<(Device, Device)> {
    match (vram_lab::hw::pick("cuda:0"), vram_lab::hw::pick("cuda:1")) {
        (Ok(a), Ok(b)) if a.is_cuda() && b.is_cuda() => Some((a, b)),
        _ => {
            eprintln!("fewer than two CUDA devices: skipped");
            None
        }
    }
}

/// The whole model on `dev`, from the seeded synthetic weights every test here uses.
fn whole(cfg: &DecoderConfig, precision: Precision, dev: &Device) -> Decoder {
    let w = load_all(cfg, &mut Synthetic::new(cfg.clone(), 9), precision, dev, None, |_, _| Ok(())).unwrap();
    Decoder::new(cfg, precision, w, dev).unwrap()
}

/// The whole model on `dev` decoding through the ranks' loop (a group of one): the arithmetic a
/// pipeline's stages do, in the same order.
fn one_gpu_loop(cfg: &DecoderConfig, precision: Precision, dev: &Device) -> Decoder {
    whole(cfg, precision, dev)
        .into_rank(std::sync::Arc::new(vram_lab::model::parallel::ThreadComm::group(1).remove(0)))
        .unwrap()
}

/// The same weights as a pipeline of one stage a device, split by the estimator.
fn piped(cfg: &DecoderConfig, precision: Precision, devices: &[Device]) -> Decoder {
    let split = pipeline_split(cfg.num_hidden_layers, 1, 1, 1, devices.len()).unwrap();
    let probes: Vec<_> = devices.iter().map(MemoryProbe::new).collect();
    load_pipeline(
        cfg,
        precision,
        &mut Synthetic::new(cfg.clone(), 9),
        devices,
        &split,
        Ends::first_and_last(devices.len()),
        &probes,
    )
    .unwrap()
}

fn prompt(cfg: &DecoderConfig) -> Vec<u32> {
    (0..96u32).map(|i| (i * 7919) % cfg.vocab_size as u32).collect()
}

/// A pipeline with a stage on each of `devices` beside the whole model on the first: logits to the
/// bit, then 32 greedy tokens, F32 and BF16.
fn pipeline_equals_one_gpu(devices: &[Device]) {
    let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
    let n = devices.len();
    for precision in [Precision::F32, Precision::Bf16] {
        let piped = piped(&cfg, precision, devices);
        let whole = whole(&cfg, precision, &devices[0]);
        let prompt = prompt(&cfg);
        let ids = Tensor::new(prompt.as_slice(), &devices[0]).unwrap().unsqueeze(0).unwrap();
        let run = |m: &Decoder| {
            m.forward(&ids, &mut m.new_cache(1, 128).unwrap(), Logits::All)
                .unwrap()
                .remove(0)
                .to_device(&Device::Cpu)
                .unwrap()
        };
        let diff = (run(&piped) - run(&whole))
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(diff, 0.0, "{precision}: {n} stages computed something else");
        let gen = GenerateConfig { max_new_tokens: 32, ..Default::default() };
        let want = generate(
            &whole.into_rank(std::sync::Arc::new(vram_lab::model::parallel::ThreadComm::group(1).remove(0))).unwrap(),
            &prompt,
            &gen,
        )
        .unwrap()
        .generated_ids;
        let got = generate(&piped, &prompt, &gen).unwrap().generated_ids;
        assert_eq!(got, want, "{precision}: greedy tokens over {n} GPUs");
        println!("{precision}: {n} stages, logits equal, {} tokens equal", got.len());
    }
}

#[test]
fn a_pipeline_over_two_gpus_equals_one_gpu() {
    let Some((a, b)) = two_gpus() else { return };
    pipeline_equals_one_gpu(&[a, b]);
}

/// Every GPU of the host as a stage (4 on a four-GPU machine): three crossings instead of one.
#[test]
fn a_pipeline_over_every_gpu_equals_one_gpu() {
    let n = vram_lab::hw::cuda_device_count();
    if n < 3 {
        eprintln!("{n} CUDA devices: the two-GPU tests cover them; skipped");
        return;
    }
    pipeline_equals_one_gpu(&(0..n).map(|i| vram_lab::hw::pick(&format!("cuda:{i}")).unwrap()).collect::<Vec<_>>());
}

/// The same check a step at a time: after the prefill and after each decoding step, the logits and
/// every layer's K/V cache of a pipeline over two GPUs, and of one whose two stages share the first
/// GPU, beside the whole model's — so a difference is placed at the step and the layer it starts.
#[test]
fn a_pipeline_decodes_step_by_step_as_one_gpu() {
    let Some((a, b)) = two_gpus() else { return };
    let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
    let precision = Precision::F32;
    let whole = whole(&cfg, precision, &a);
    let prompt = prompt(&cfg);
    let cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_dtype(candle_core::DType::F32).unwrap();
    let diff = |x: &Tensor, y: &Tensor| {
        (cpu(x) - cpu(y)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
    };
    let mut failures = Vec::new();
    for (name, devices) in [("GPUs 0 and 1", vec![a.clone(), b.clone()]), ("GPU 0 twice", vec![a.clone(), a.clone()])] {
        let piped = piped(&cfg, precision, &devices);
        let (mut cw, mut cp) = (whole.new_cache(1, 128).unwrap(), piped.new_cache(1, 128).unwrap());
        let mut ids = prompt.clone();
        for step in 0..4 {
            let run = |m: &Decoder, c: &mut vram_lab::model::KvCache| {
                let t = Tensor::new(ids.as_slice(), m.device()).unwrap().unsqueeze(0).unwrap();
                m.forward(&t, c, Logits::Last).unwrap().remove(0)
            };
            let (lw, lp) = (run(&whole, &mut cw), run(&piped, &mut cp));
            let logits = diff(&lw, &lp);
            let layers: Vec<(usize, f32)> = (0..cfg.num_hidden_layers)
                .map(|l| {
                    let (kw, vw) = cw.view(l, cw.len()).unwrap();
                    let (kp, vp) = cp.view(l, cp.len()).unwrap();
                    (l, diff(&kw, &kp).max(diff(&vw, &vp)))
                })
                .filter(|(_, d)| *d != 0.0)
                .collect();
            println!(
                "{name}, step {step} ({} positions): logits differ by {logits}; layers whose cache differs: {layers:?}",
                ids.len()
            );
            if logits != 0.0 || !layers.is_empty() {
                failures.push(format!("{name}, step {step}"));
            }
            let next = cpu(&lw).flatten_all().unwrap().argmax(0).unwrap().to_scalar::<u32>().unwrap();
            ids = vec![next];
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Where the greedy loop over a pipeline parts from the one-GPU loop: `generate` itself twice, and
/// the same loop with every GPU synchronised after each forward, each beside the whole model.
#[test]
fn a_pipelines_greedy_loop_with_and_without_synchronising() {
    let Some((a, b)) = two_gpus() else { return };
    let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
    let precision = Precision::F32;
    let whole = one_gpu_loop(&cfg, precision, &a);
    let piped = piped(&cfg, precision, &[a.clone(), b.clone()]);
    let prompt = prompt(&cfg);
    let gen = GenerateConfig { max_new_tokens: 16, ..Default::default() };
    let want = generate(&whole, &prompt, &gen).unwrap().generated_ids;
    let looped = |m: &Decoder, sync: bool| -> Vec<u32> {
        let mut cache = m.new_cache(1, 128).unwrap();
        let mut ids = prompt.clone();
        let mut out = Vec::new();
        while out.len() < 16 {
            let t = Tensor::new(ids.as_slice(), m.device()).unwrap().unsqueeze(0).unwrap();
            let logits = m.forward(&t, &mut cache, Logits::Last).unwrap().remove(0);
            if sync {
                a.synchronize().unwrap();
                b.synchronize().unwrap();
            }
            let next = vram_lab::model::generate::argmax(&vram_lab::model::decoder::last_logits(&[logits]).unwrap())
                .unwrap()[0];
            out.push(next);
            ids = vec![next];
        }
        out
    };
    let mut bad = Vec::new();
    for (name, got) in [
        ("generate", generate(&piped, &prompt, &gen).unwrap().generated_ids),
        ("generate again", generate(&piped, &prompt, &gen).unwrap().generated_ids),
        ("loop", looped(&piped, false)),
        ("loop, GPUs synchronised", looped(&piped, true)),
        ("the whole model's loop", looped(&whole, false)),
    ] {
        let same = want.iter().zip(&got).take_while(|(x, y)| x == y).count();
        println!("{name}: {same} of {} equal: {got:?}", want.len());
        if same != want.len() {
            bad.push(name);
        }
    }
    println!("the whole model: {want:?}");
    assert!(bad.is_empty(), "{bad:?}");
}

/// The greedy loop six times over: the whole model on one GPU, a pipeline over GPUs 0 and 1, and a
/// pipeline whose two stages share GPU 0 — each run's tokens beside the whole model's first, so a
/// random difference shows how often, and whether it needs two GPUs.
#[test]
fn a_pipelines_tokens_over_repeated_runs() {
    let Some((a, b)) = two_gpus() else { return };
    let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
    let precision = Precision::F32;
    let one = one_gpu_loop(&cfg, precision, &a);
    let two = piped(&cfg, precision, &[a.clone(), b.clone()]);
    let same = piped(&cfg, precision, &[a.clone(), a.clone()]);
    let prompt = prompt(&cfg);
    let gen = GenerateConfig { max_new_tokens: 32, ..Default::default() };
    let want = generate(&one, &prompt, &gen).unwrap().generated_ids;
    let mut bad = Vec::new();
    for (name, m) in [("one GPU", &one), ("GPUs 0 and 1", &two), ("GPU 0 twice", &same)] {
        let counts: Vec<usize> = (0..6)
            .map(|_| {
                let got = generate(m, &prompt, &gen).unwrap().generated_ids;
                want.iter().zip(&got).take_while(|(x, y)| x == y).count()
            })
            .collect();
        println!("{name}: tokens equal to one GPU's in six runs: {counts:?} of {}", want.len());
        if counts.iter().any(|&c| c != want.len()) {
            bad.push(name);
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}

/// Every GPU of the host as a tensor-parallel rank summing through the group (NCCL, with the small
/// sums over peer memory where the GPUs reach each other): 300 sums a rank queued back to back
/// with no wait between them (each rank's part fresh each time, so a sum that read a half another
/// rank had already overwritten would show), a step's hidden state (5,120 BF16, and with the
/// residual added) and a head's logits over the peer kernel's limit (NCCL); each result beside
/// the CPU's sum of the same parts: F32 adds in rank order, rounded to BF16 once (two ranks: as
/// NCCL rounds; more: NCCL's ring adds in another order, so only the peer kernel's sums compare).
#[test]
#[cfg(feature = "nccl")]
fn sums_across_gpus_equal_the_cpu_sum() {
    use candle_core::DType;
    use vram_lab::model::parallel::group::{devices, on_each};
    let n = vram_lab::hw::cuda_device_count();
    if n < 2 {
        eprintln!("{n} CUDA devices: skipped");
        return;
    }
    let first = vram_lab::hw::pick("cuda:0").unwrap();
    let group = vram_lab::model::parallel::Group::new(n, true).unwrap();
    // Values of a few bits each, from a hash of where they are: the same every time they are made.
    let part = |rank: usize, i: usize, len: usize| {
        let v: Vec<f32> = (0..len)
            .map(|j| {
                let h = (j as u64 ^ (rank as u64) << 40 ^ (i as u64) << 20).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h % 20_011) as f32 / 997.0 - 10.0
            })
            .collect();
        Tensor::new(v, &Device::Cpu).unwrap()
    };
    let (rounds, hidden, big) = (300, 5120, 600_000);
    let results = on_each(devices(&first, n).unwrap(), |rank, dev| {
        let comm = group.join(rank, &dev)?;
        if rank == 0 {
            println!("the sums: {}", comm.route());
        }
        let mut parts = Vec::new();
        for i in 0..rounds {
            let len = if i % 50 == 7 { big } else { hidden };
            parts.push(part(rank, i, len).to_dtype(DType::BF16)?.to_device(&dev)?);
        }
        let res = part(99, 0, hidden).to_dtype(DType::BF16)?.to_device(&dev)?;
        let mut sums = Vec::new();
        for (i, x) in parts.iter().enumerate() {
            let with_res = i % 3 == 1 && x.elem_count() == hidden;
            sums.push(comm.all_reduce_sum_add(x, with_res.then_some(&res))?);
        }
        comm.healthy()?;
        Ok(sums.into_iter().map(|s| s.to_dtype(DType::F32).and_then(|s| s.to_vec1::<f32>())).collect::<Vec<_>>())
    });
    let res: Vec<f32> =
        part(99, 0, hidden).to_dtype(DType::BF16).unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap();
    let round = |v: Vec<f32>| -> Vec<f32> {
        Tensor::new(v, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let mut wrong = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        let sums = r.unwrap();
        for (i, got) in sums.into_iter().enumerate() {
            let got = got.unwrap();
            let len = got.len();
            if len == big && n > 2 {
                continue;
            }
            let mut want = vec![0f32; len];
            for p in 0..n {
                let x: Vec<f32> =
                    part(p, i, len).to_dtype(DType::BF16).unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap();
                want.iter_mut().zip(x).for_each(|(w, x)| *w += x);
            }
            let mut want = round(want);
            if i % 3 == 1 && len == hidden {
                want = round(want.iter().zip(&res).map(|(w, r)| w + r).collect());
            }
            let bad = got.iter().zip(&want).filter(|(g, w)| g.to_bits() != w.to_bits()).count();
            if bad > 0 {
                wrong.push(format!("rank {rank}, sum {i} ({len} values): {bad} differ"));
            }
        }
    }
    println!("{n} GPUs, {rounds} sums a rank: {} wrong", wrong.len());
    assert!(wrong.is_empty(), "{}", wrong.iter().take(10).cloned().collect::<Vec<_>>().join("\n"));
}
