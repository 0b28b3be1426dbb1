//! The lab's CUDA kernels for the decoding step against candle's kernels, and the staged
//! safetensors upload against candle's reader, on a GPU. Built only
//! with `--features cuda`; a machine without a GPU skips it (CI has none: the device runs it,
//! `scripts/gpu/run.sh` with the test binary built by `cargo test --release --features cuda --no-run`).
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use vram_lab::model::kernels::decode::{DecodeKernels, GEMV_MAX_BATCH};
use vram_lab::model::kernels::{Fused, Weights};

fn gpu() -> Option<(Device, candle_core::CudaDevice)> {
    match Device::new_cuda(0) {
        Ok(Device::Cuda(d)) => Some((Device::Cuda(d.clone()), d)),
        _ => {
            eprintln!("no CUDA device: skipped");
            None
        }
    }
}

fn randn(shape: &[usize], dtype: DType, dev: &Device) -> Tensor {
    Tensor::randn(0f32, 1f32, shape, dev).unwrap().to_dtype(dtype).unwrap()
}

/// The largest |a - b| over the largest |b|, both in F32.
fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_dtype(DType::F32).unwrap(), b.to_dtype(DType::F32).unwrap());
    let diff = (&a - &b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    diff / scale.max(1e-6)
}

/// NVRTC compiles every kernel (no GPU needed: a compile error shows here, not on the device).
#[test]
fn kernels_compile() {
    let flash = vram_lab::model::kernels::flash_attention::ptx().unwrap();
    for d in vram_lab::model::kernels::flash_attention::HEAD_DIMS {
        for kernel in [format!("vram_lab_flash_bf16_d{d}_r128"), format!("vram_lab_flash_bf16_d{d}_wide")] {
            assert!(flash.contains(&kernel), "{kernel} missing from the PTX");
        }
    }
    let hopper = vram_lab::model::kernels::flash_attention::ptx_sm90().unwrap();
    assert!(hopper.contains(".target sm_90a"), "the Hopper kernel is compiled for 9.0a");
    assert!(hopper.contains("vram_lab_flash_bf16_d128_hopper") && hopper.contains("wgmma.mma_async"));
    // The copying warpgroup announces its tiles through mbarriers and gives its registers away.
    for op in ["cp.async.mbarrier.arrive.noinc", "mbarrier.try_wait.parity", "setmaxnreg.dec", "bar.arrive"] {
        assert!(hopper.contains(op), "the Hopper kernel lacks {op}");
    }
    let ptx = vram_lab::model::kernels::decode::ptx().unwrap();
    for name in
        ["vram_lab_qkv_store_bf16", "vram_lab_gemv_f32_b2_g2_norm_s4", "vram_lab_attend_bf16", "vram_lab_argmax_f32"]
    {
        assert!(ptx.contains(name), "{name} missing from the PTX");
    }
    let ptx = vram_lab::model::kernels::elementwise::ptx().unwrap();
    for name in ["vram_lab_add_bf16", "vram_lab_mul_bf16", "vram_lab_bias_add_bf16", "vram_lab_heads_first_bf16"] {
        assert!(ptx.contains(name), "{name} missing from the PTX");
    }
    let ptx = vram_lab::model::kernels::peer_sum::ptx().unwrap();
    for name in ["vram_lab_peer_sum_bf16", "vram_lab_peer_sum_f32"] {
        assert!(ptx.contains(name), "{name} missing from the PTX");
    }
    let ptx = vram_lab::model::kernels::quant_gemv::ptx().unwrap();
    for name in ["vram_lab_q8_quantize_norm_bf16", "vram_lab_qgemv_bf16_b2_g2", "vram_lab_qgemv_f32_b1_g1"] {
        assert!(ptx.contains(name), "{name} missing from the PTX");
    }
}

/// Every kernel's PTX targets the capability the binary is built for (`CUDA_COMPUTE_CAP`: an
/// RTX 4090 build carries 8.9 PTX, which this card's driver compiles for itself), and a launch the
/// built-for card could not make is refused before it is made: a kernel bounded to 128 threads a
/// block, asked for 256.
#[test]
fn kernels_target_the_built_for_card() {
    use vram_lab::model::kernels::target::{arch, built_for, launchable};
    let ptx = vram_lab::model::kernels::decode::ptx().unwrap();
    if let Some(cap) = built_for() {
        let want = format!(".target sm_{cap}");
        assert!(ptx.contains(&want), "decode PTX is not for compute {cap}: {}", &ptx[..ptx.len().min(400)]);
        eprintln!("built for compute {cap}: NVRTC arch {:?}", arch(0));
    }
    let Some((_, dev)) = gpu() else { return };
    let src = "extern \"C\" __global__ void __launch_bounds__(128) bounded(float *x) { x[threadIdx.x] = 1.0f; }";
    let ptx = candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(src).unwrap();
    let f =
        dev.get_or_load_custom_func("bounded", "vram_lab_test_bounded", &ptx.to_src()).unwrap().into_cuda_function();
    assert!(launchable(&f, "bounded", 128).is_ok());
    let e = launchable(&f, "bounded", 256).unwrap_err().to_string();
    assert!(e.contains("256 threads"), "{e}");
    // The lab's own kernels pass the same check as they load.
    assert!(DecodeKernels::new(&dev, DType::BF16).unwrap().is_some());
}

/// x [.., k] in F32 rounded as the quantized product rounds it: per 32 values, to multiples of
/// d = (largest |x|) / 127 (llama.cpp's q8_1).
fn q8(x: &Tensor) -> Tensor {
    let shape = x.dims().to_vec();
    let blocks = x.reshape(((), 32)).unwrap();
    let d = (blocks.abs().unwrap().max_keepdim(1).unwrap() / 127.0).unwrap();
    blocks.broadcast_div(&d).unwrap().round().unwrap().broadcast_mul(&d).unwrap().reshape(shape).unwrap()
}

/// The product over Q4_K and Q6_K blocks (x quantized to 8 bits inside, the RMS norm before it)
/// against the dequantized weights times x rounded the same way (`q8`), in F32: equal to the
/// order of summation (F32) or the output's rounding (BF16), with every fusion the dense kernel
/// has, rows as long as the MLP's down projection's (18,944), and three
/// parts of mixed types (q and k in Q4_K, v in Q6_K, as llama.cpp's Q4_K_M stores some layers).
#[test]
fn quantized_gemv_equals_dequantized_products() {
    use candle_core::quantized::{GgmlDType, QTensor};
    use vram_lab::model::kernels::quant_gemv::{QuantKernels, QGEMV_MAX_BATCH};
    let Some((dev, cuda)) = gpu() else { return };
    for (dtype, tol) in [(DType::BF16, 1e-2), (DType::F32, 1e-3)] {
        let k = QuantKernels::new(&cuda, dtype).unwrap().expect("kernels for BF16 and F32");
        for (n, kdim) in [(37, 256), (300, 3584), (9, 18944)] {
            let quant = |rows: usize, t: GgmlDType| {
                let w = Tensor::randn(0f32, 1f32, (rows, kdim), &dev).unwrap();
                let q = QTensor::quantize(&w, t).unwrap();
                let back = q.dequantize(&dev).unwrap();
                (q, back)
            };
            let (q4, w4) = quant(n, GgmlDType::Q4K);
            let (q6, w6) = quant(n, GgmlDType::Q6K);
            let (q4b, w4b) = quant(1 + n / 3, GgmlDType::Q4K);
            for b in 1..=QGEMV_MAX_BATCH {
                let x = randn(&[b, 1, kdim], dtype, &dev);
                let bias = randn(&[n], dtype, &dev);
                let res = randn(&[b, 1, n], dtype, &dev);
                let g = randn(&[kdim], dtype, &dev);
                let (xr, normed) = (q8(&to_f32(&x)), q8(&rms(&x, &g)));
                let product = |x: &Tensor, w: &Tensor| x.broadcast_matmul(&w.t().unwrap()).unwrap();
                let check = |what: &str, parts: &[(&QTensor, Option<&Tensor>)], f: Fused, want: Tensor| {
                    let got = k.gemv(parts, &x, f).unwrap().expect("taken");
                    assert_eq!(got.dims(), want.dims(), "{what}");
                    let e = rel_err(&got, &want);
                    assert!(e < tol, "{dtype:?} {what} n {n} k {kdim} b {b}: {e}");
                };
                for (t, q, w) in [("q4_k", &q4, &w4), ("q6_k", &q6, &w6)] {
                    check(t, &[(q, None)], Fused::default(), product(&xr, w));
                    let full = product(&xr, w).broadcast_add(&to_f32(&bias)).unwrap().add(&to_f32(&res)).unwrap();
                    check(
                        &format!("{t} bias+res"),
                        &[(q, Some(&bias))],
                        Fused { res: Some(&res), ..Default::default() },
                        full,
                    );
                    let want = product(&normed, w).broadcast_add(&to_f32(&bias)).unwrap();
                    check(
                        &format!("{t} norm+bias"),
                        &[(q, Some(&bias))],
                        Fused { norm: Some((&g, 1e-6)), ..Default::default() },
                        want,
                    );
                }
                let stacked = Tensor::cat(&[&w4, &w4b, &w6], 0).unwrap();
                let tb = bias.narrow(0, 0, 1 + n / 3).unwrap();
                let biases =
                    Tensor::cat(&[&to_f32(&bias), &to_f32(&tb), &Tensor::zeros(n, DType::F32, &dev).unwrap()], 0)
                        .unwrap();
                let want = product(&normed, &stacked).broadcast_add(&biases).unwrap();
                check(
                    "three parts, mixed types, norm",
                    &[(&q4, Some(&bias)), (&q4b, Some(&tb)), (&q6, None)],
                    Fused { norm: Some((&g, 1e-6)), ..Default::default() },
                    want,
                );
                let glu = candle_nn::ops::silu(&product(&normed, &w4)).unwrap().mul(&product(&normed, &w6)).unwrap();
                check(
                    "norm+glu",
                    &[(&q4, None), (&q6, None)],
                    Fused { glu: true, norm: Some((&g, 1e-6)), ..Default::default() },
                    glu,
                );
            }
        }
        // Block types without a kernel, and a batch too large, are left to candle.
        let w = QTensor::quantize(&Tensor::randn(0f32, 1f32, (8, 256), &dev).unwrap(), GgmlDType::Q4_0).unwrap();
        assert!(k.gemv(&[(&w, None)], &randn(&[1, 1, 256], dtype, &dev), Fused::default()).unwrap().is_none());
        let w = QTensor::quantize(&Tensor::randn(0f32, 1f32, (8, 256), &dev).unwrap(), GgmlDType::Q4K).unwrap();
        assert!(k
            .gemv(&[(&w, None)], &randn(&[QGEMV_MAX_BATCH + 1, 1, 256], dtype, &dev), Fused::default())
            .unwrap()
            .is_none());
    }
}

fn to_f32(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F32).unwrap()
}

/// candle's RMS norm of x with the weight g, in F32.
fn rms(x: &Tensor, g: &Tensor) -> Tensor {
    candle_nn::ops::rms_norm(&to_f32(x), &to_f32(g), 1e-6).unwrap()
}

/// Every batch up to the kernel's largest, rows long enough for the four-load loop and its tail,
/// with a bias and a residual, three weights one under the other, silu(gate)·up, and the RMS norm
/// of x inside: equal to candle's
/// kernels computed in F32 (F32 to summation order, BF16 to its one rounding).
#[test]
fn gemv_equals_candles_products() {
    let Some((dev, cuda)) = gpu() else { return };
    for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 1e-2)] {
        let k = DecodeKernels::new(&cuda, dtype).unwrap().expect("kernels for BF16 and F32");
        // Row lengths and counts that take every split (`gemv_split`): one warp per row (short
        // rows; many rows) to eight (rows of 18,944, the MLP's down projection).
        for (n, kdim) in [(37, 64), (300, 3584), (5, 1008), (9, 18944), (8200, 2048)] {
            for b in 1..=GEMV_MAX_BATCH {
                let w = randn(&[2 * n, kdim], dtype, &dev);
                let x = randn(&[b, 1, kdim], dtype, &dev);
                let bias = randn(&[n], dtype, &dev);
                let res = randn(&[b, 1, n], dtype, &dev);
                let g = randn(&[kdim], dtype, &dev);
                let (gate, up) = (w.narrow(0, 0, n).unwrap(), w.narrow(0, n, n).unwrap());
                let check = |what: &str, parts: &[(&Tensor, Option<&Tensor>)], f: Fused, want: Tensor| {
                    let parts: Vec<_> = parts.iter().map(|&(w, b)| (Weights::Dense(w), b)).collect();
                    let got = k.gemv(&parts, &x, f).unwrap().expect("taken");
                    assert_eq!(got.dims(), want.dims(), "{what}");
                    let e = rel_err(&got, &want);
                    assert!(e < tol, "{dtype:?} {what} n {n} k {kdim} b {b}: {e}");
                };
                let product = |x: &Tensor, w: &Tensor| x.broadcast_matmul(&to_f32(w).t().unwrap()).unwrap();
                let plain = product(&to_f32(&x), &gate);
                check("plain", &[(&gate, None)], Fused::default(), plain.clone());
                let full = plain.broadcast_add(&to_f32(&bias)).unwrap().add(&to_f32(&res)).unwrap();
                check("bias+res", &[(&gate, Some(&bias))], Fused { res: Some(&res), ..Default::default() }, full);
                let normed = product(&rms(&x, &g), &gate).broadcast_add(&to_f32(&bias)).unwrap();
                check(
                    "norm+bias",
                    &[(&gate, Some(&bias))],
                    Fused { norm: Some((&g, 1e-6)), ..Default::default() },
                    normed,
                );
                // Three parts one under the other (q, k, v), each with its bias or none: the
                // product of the stacked weight and biases.
                let third = w.narrow(0, 0, 1 + n / 3).unwrap();
                let stacked = Tensor::cat(&[&gate, &up, &third], 0).unwrap();
                let biases = Tensor::cat(
                    &[&bias, &Tensor::zeros(n, dtype, &dev).unwrap(), &bias.narrow(0, 0, 1 + n / 3).unwrap()],
                    0,
                )
                .unwrap();
                let want = product(&to_f32(&x), &stacked).broadcast_add(&to_f32(&biases)).unwrap();
                let tb = bias.narrow(0, 0, 1 + n / 3).unwrap();
                check("three parts", &[(&gate, Some(&bias)), (&up, None), (&third, Some(&tb))], Fused::default(), want);
                // silu(gate)·up, without and with the norm.
                let glu =
                    |x: Tensor| candle_nn::ops::silu(&product(&x, &gate)).unwrap().mul(&product(&x, &up)).unwrap();
                let gu = [(&gate, None), (&up, None)];
                check("glu", &gu, Fused { glu: true, ..Default::default() }, glu(to_f32(&x)));
                check(
                    "norm+glu",
                    &gu,
                    Fused { glu: true, norm: Some((&g, 1e-6)), ..Default::default() },
                    glu(rms(&x, &g)),
                );
            }
        }
        // What the kernel does not take is left to candle: too many rows, rows not a whole
        // number of 16-byte loads, a strided input.
        let w = randn(&[16, 64], dtype, &dev);
        let none =
            |w: &Tensor, x: &Tensor| k.gemv(&[(Weights::Dense(w), None)], x, Fused::default()).unwrap().is_none();
        assert!(none(&w, &randn(&[GEMV_MAX_BATCH + 1, 1, 64], dtype, &dev)));
        assert!(none(&randn(&[16, 66], dtype, &dev), &randn(&[1, 1, 66], dtype, &dev)));
        assert!(none(&w, &randn(&[2, 128], dtype, &dev).narrow(1, 0, 64).unwrap()));
    }
    assert!(DecodeKernels::new(&cuda, DType::F16).unwrap().is_none());
}

/// One position's rotary, cache store and attention (q, k, v from the stacked product as it came
/// out; cache positions below pos and the position's own k and v) and the greedy pick, against
/// candle's rotary, softmax and products in F32.
#[test]
fn attention_and_argmax_equal_candles() {
    let Some((dev, cuda)) = gpu() else { return };
    for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 2e-2)] {
        let k = DecodeKernels::new(&cuda, dtype).unwrap().expect("kernels for BF16 and F32");
        // Qwen2.5-7B's heads (28 q, 4 kv, 128 wide) and 0.5B's width (64); positions from the
        // first to more than the block's 32 in flight, and over a long cache's runs.
        // Head sizes 256 (two 16-byte loads a lane in F32) and 32 (four lanes a row in BF16).
        for (b, heads, kv, d, cap, pos) in [
            (1, 28, 4, 128, 200, 0),
            (1, 28, 4, 128, 200, 150),
            (2, 14, 2, 64, 40, 39),
            (1, 8, 2, 256, 300, 257),
            (1, 4, 4, 32, 30, 21),
            // Caches long enough that a head's positions are split into runs and merged: most
            // runs empty, every run full, two rows of a batch.
            (1, 28, 4, 128, 4096, 5),
            (1, 28, 4, 128, 4096, 3000),
            (2, 14, 2, 64, 1024, 700),
        ] {
            let y = randn(&[b, 1, (heads + 2 * kv) * d], dtype, &dev);
            let angles = randn(&[cap, d / 2], DType::F32, &dev);
            let (cos, sin) =
                (angles.cos().unwrap().to_dtype(dtype).unwrap(), angles.sin().unwrap().to_dtype(dtype).unwrap());
            let kc = randn(&[b, kv, cap, d], dtype, &dev);
            let vc = randn(&[b, kv, cap, d], dtype, &dev);
            let (kc0, vc0) = (kc.copy().unwrap(), vc.copy().unwrap());
            let p = Tensor::new(&[pos as u32], &dev).unwrap();
            let scale = 1.0 / (d as f32).sqrt();
            let got = k.attend(&y, &cos, &sin, &kc, &vc, &p, heads, scale).unwrap().expect("taken");
            // The reference: candle's rotary at pos, k and v as the cache holds them (dtype).
            let (c1, s1) = (to_f32(&cos).narrow(0, pos, 1).unwrap(), to_f32(&sin).narrow(0, pos, 1).unwrap());
            let part =
                |from: usize, n: usize| to_f32(&y).narrow(2, from * d, n * d).unwrap().reshape((b, n, 1, d)).unwrap();
            let q = candle_nn::rotary_emb::rope(&part(0, heads), &c1, &s1).unwrap();
            let k_now = candle_nn::rotary_emb::rope(&part(heads, kv), &c1, &s1).unwrap().to_dtype(dtype).unwrap();
            let v_now = part(heads + kv, kv).to_dtype(dtype).unwrap();
            let keys = Tensor::cat(&[to_f32(&kc0).narrow(2, 0, pos).unwrap(), to_f32(&k_now)], 2).unwrap();
            let vals = Tensor::cat(&[to_f32(&vc0).narrow(2, 0, pos).unwrap(), to_f32(&v_now)], 2).unwrap();
            let q = (q.reshape((b, kv, heads / kv, d)).unwrap() * scale as f64).unwrap();
            let probs = candle_nn::ops::softmax_last_dim(&q.matmul(&keys.t().unwrap()).unwrap()).unwrap();
            let want = probs.matmul(&vals).unwrap().reshape((b, 1, heads * d)).unwrap();
            let e = rel_err(&got, &want);
            assert!(e < tol, "{dtype:?} attention b {b} heads {heads} d {d} pos {pos}: {e}");
            // The store: row pos holds k rotated and v; every other row is as it was.
            for (cache, before, now) in [(&kc, &kc0, &k_now), (&vc, &vc0, &v_now)] {
                // One rounding of the same F32 value; products summed in another order may round apart.
                let e = rel_err(&cache.narrow(2, pos, 1).unwrap(), now);
                assert!(e <= if dtype == DType::F32 { 1e-6 } else { 1e-2 }, "{dtype:?} row pos {pos} stored: {e}");
                let others = |t: &Tensor| {
                    Tensor::cat(&[t.narrow(2, 0, pos).unwrap(), t.narrow(2, pos + 1, cap - pos - 1).unwrap()], 2)
                        .unwrap()
                };
                assert_eq!(rel_err(&others(cache), &others(before)), 0.0, "{dtype:?} other rows untouched");
            }
        }
        // Random BF16 logits can tie at the top: the pick must hold the row's largest value, and
        // a planted largest value must be found where it was planted. 1,001 values a row start
        // the second row off the 16-byte grid (the one-value path); 1,003 leave a ragged end.
        for (b, vocab) in [(1, 152_064), (2, 1000), (2, 1001), (1, 1003)] {
            let logits = randn(&[b, 1, vocab], dtype, &dev);
            let got = k.argmax(&logits).unwrap().expect("taken").flatten_all().unwrap().to_vec1::<u32>().unwrap();
            let rows = to_f32(&logits).reshape((b, vocab)).unwrap().to_vec2::<f32>().unwrap();
            for (row, &i) in rows.iter().zip(&got) {
                let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(row[i as usize], max, "{dtype:?} argmax b {b}");
            }
            let at = vocab - 7;
            let planted = Tensor::zeros((b, 1, vocab), dtype, &dev)
                .unwrap()
                .slice_assign(&[0..b, 0..1, at..at + 1], &Tensor::ones((b, 1, 1), dtype, &dev).unwrap())
                .unwrap();
            let got = k.argmax(&planted).unwrap().expect("taken").flatten_all().unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(got, vec![at as u32; b], "{dtype:?} planted argmax");
            // Two equal largest values, the second in another thread's run: the first is picked.
            let two =
                planted.slice_assign(&[0..b, 0..1, 5..6], &Tensor::ones((b, 1, 1), dtype, &dev).unwrap()).unwrap();
            let got = k.argmax(&two).unwrap().expect("taken").flatten_all().unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(got, vec![5; b], "{dtype:?} first of equal largest values");
        }
    }
}

/// Prefill attention in one kernel against the naive attention in F32: Qwen2.5-7B's heads (28 q,
/// 4 kv, 128 wide) and 0.5B's (14, 2, 64), a prompt from an empty cache and a continuation after
/// a prefix (queries at positions offset..), lengths that leave a partial tile, the cache read as
/// the strided view a layer passes, in every layout of a block's warps (Hopper's where the device
/// runs it, else refused); what it does not take is left to the caller.
#[test]
fn flash_attention_equals_naive() {
    use vram_lab::model::kernels::flash_attention::{self, Layout};
    use vram_lab::model::layers::attention::{attend, AttentionMode};
    let Some((dev, cuda)) = gpu() else { return };
    for (b, heads, kv, d, s, offset) in [
        (1, 28, 4, 128, 200, 0),
        (1, 28, 4, 128, 64, 0),
        (2, 14, 2, 64, 77, 50),
        (1, 28, 4, 128, 3, 130),
        (1, 8, 2, 128, 700, 0),
        (1, 8, 2, 64, 300, 900),
        (2, 8, 2, 128, 150, 70),
    ] {
        let cap = offset + s + 40;
        let q = randn(&[b, heads, s, d], DType::BF16, &dev);
        let kc = randn(&[b, kv, cap, d], DType::BF16, &dev);
        let vc = randn(&[b, kv, cap, d], DType::BF16, &dev);
        let (k, v) = (kc.narrow(2, 0, offset + s).unwrap(), vc.narrow(2, 0, offset + s).unwrap());
        let want = attend(&to_f32(&q), &to_f32(&k), &to_f32(&v), offset, AttentionMode::Naive).unwrap();
        let want = want.transpose(1, 2).unwrap().reshape((b, s, heads * d)).unwrap();
        let hopper = d == 128 && flash_attention::hopper(&cuda);
        for layout in [Layout::Narrow, Layout::Wide, Layout::Hopper] {
            if layout == Layout::Hopper && !hopper {
                assert!(flash_attention::attend_in(&q, &k, &v, offset, layout).is_err(), "refused where it cannot run");
                continue;
            }
            let got = flash_attention::attend_in(&q, &k, &v, offset, layout).unwrap().expect("taken");
            assert_eq!(got.dims(), want.dims());
            let e = rel_err(&got, &want);
            assert!(e < 2e-2, "flash {layout:?} b {b} heads {heads} d {d} s {s} offset {offset}: {e}");
        }
    }
    let q = randn(&[1, 4, 8, 128], DType::F32, &dev);
    let k = randn(&[1, 2, 8, 128], DType::F32, &dev);
    assert!(flash_attention::attend(&q, &k, &k, 0).unwrap().is_none(), "F32 is left to bounded");
    let q = randn(&[1, 4, 8, 96], DType::BF16, &dev);
    let k = randn(&[1, 2, 8, 96], DType::BF16, &dev);
    assert!(flash_attention::attend(&q, &k, &k, 0).unwrap().is_none(), "a head size without a build");
}

/// The staged loader's tensors equal candle's reading of the same file, byte for byte: tensors of
/// several staging buffers (both buffers reused), one smaller than a buffer, each dtype.
#[test]
fn staged_upload_equals_candles_reading() {
    let Some((dev, cuda)) = gpu() else { return };
    let cpu = Device::Cpu;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.safetensors");
    let tensors = std::collections::HashMap::from([
        ("big".to_string(), randn(&[1000, 3001], DType::BF16, &cpu)),
        ("f32".to_string(), randn(&[777, 513], DType::F32, &cpu)),
        ("f16".to_string(), randn(&[5, 7], DType::F16, &cpu)),
    ]);
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let files = vec![file.clone()];
    let index = vram_lab::model::load::upload::index(&files).unwrap();
    // 1 MiB buffers: the BF16 tensor (5.7 MiB) takes six pieces.
    let mut up = vram_lab::model::load::upload::Uploader::new(&cuda, 1 << 20).unwrap();
    let f = std::fs::File::open(&file).unwrap();
    let on_gpu: Vec<(String, Tensor)> = index.iter().map(|(n, e)| (n.clone(), up.tensor(&f, e).unwrap())).collect();
    drop(up);
    for (name, got) in on_gpu {
        let want = &tensors[&name];
        assert_eq!((got.dtype(), got.dims()), (want.dtype(), want.dims()), "{name}");
        assert!(got.device().same_device(&dev));
        let diff =
            (got.to_device(&cpu).unwrap().to_dtype(DType::F32).unwrap() - want.to_dtype(DType::F32).unwrap()).unwrap();
        assert_eq!(diff.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0, "{name}");
    }
}

/// The lab's BF16 rotary kernel rounds each product and then their sum, bit for bit as candle's
/// CPU kernel does (and PyTorch's eager `q·cos + rotate_half(q)·sin`), on whichever compute
/// capability the build names; candle's CUDA kernel fuses a product into the sum at 9.0.
#[test]
fn rope_rounds_as_the_cpu_does() {
    let Some((dev, _)) = gpu() else { return };
    // d = 128 takes eight pairs a thread, d = 24 one (its rows do not run in 16-byte pieces).
    for (per_batch, d) in [(false, 128), (true, 128), (false, 24), (true, 24)] {
        let (b, heads, t, tc) = (2, 4, 37, 40);
        let x = randn(&[b, heads, t, d], DType::BF16, &Device::Cpu);
        let table: Vec<usize> = if per_batch { vec![b, tc, d / 2] } else { vec![tc, d / 2] };
        let ang = (Tensor::rand(0f32, 6.3, table.as_slice(), &Device::Cpu).unwrap() * 50.0).unwrap();
        let (cos, sin) =
            (ang.cos().unwrap().to_dtype(DType::BF16).unwrap(), ang.sin().unwrap().to_dtype(DType::BF16).unwrap());
        let rows = |z: &Tensor| {
            if per_batch {
                z.narrow(1, 0, t).unwrap().contiguous().unwrap()
            } else {
                z.narrow(0, 0, t).unwrap()
            }
        };
        let want = candle_nn::rotary_emb::rope(&x, &rows(&cos), &rows(&sin)).unwrap();
        let on = |z: &Tensor| z.to_device(&dev).unwrap();
        let got = vram_lab::model::kernels::rope::rope(&on(&x), &on(&cos), &on(&sin))
            .unwrap()
            .expect("the kernel takes BF16");
        let bits = |z: &Tensor| {
            z.to_device(&Device::Cpu)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let (g, w) = (bits(&got), bits(&want));
        let differing = |g: &[f32]| g.iter().zip(&w).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        // candle's CUDA kernel beside them, shown, not asserted: the build's compute capability
        // decides whether its products are fused (9.0) or rounded (8.x).
        let candles = candle_nn::rotary_emb::rope(&on(&x), &on(&rows(&cos)), &on(&rows(&sin))).unwrap();
        println!(
            "rope per_batch {per_batch}, d {d}: candle's CUDA rope differs from its CPU rope in {} of {} elements (build for compute {:?}); the lab's in {}",
            differing(&bits(&candles)),
            w.len(),
            vram_lab::model::kernels::target::built_for(),
            differing(&g)
        );
        assert_eq!(differing(&g), 0, "per_batch {per_batch}, d {d}: the lab's rope differs from candle's CPU rope");
    }
    // F32 is candle's own: the kernel declines it.
    let x32 = randn(&[1, 1, 4, 8], DType::F32, &dev);
    let cs = randn(&[4, 4], DType::F32, &dev);
    assert!(vram_lab::model::kernels::rope::rope(&x32, &cs, &cs).unwrap().is_none());
}

/// The element-wise kernels give candle's ops bit for bit: the adds and products (one correct
/// rounding each), a bias added to every row, silu, the heads-first copy, the RMS norm; they leave to
/// candle what they do not take (a length not a multiple of 8, a strided view, F32, a tensor with a
/// gradient, a row the norm's order would not match).
#[test]
fn elementwise_equals_candles() {
    use vram_lab::model::kernels::elementwise;
    let Some((dev, _)) = gpu() else { return };
    let bits = |t: &Tensor| t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    // Values spread over many binades, so sums and products round often and sometimes cancel.
    let wide = |shape: &[usize]| {
        let scale = Tensor::randn(0f32, 4f32, shape, &dev).unwrap().exp().unwrap();
        (randn(shape, DType::F32, &dev) * scale).unwrap().to_dtype(DType::BF16).unwrap()
    };
    let (a, b) = (wide(&[3, 5, 64]), wide(&[3, 5, 64]));
    assert_eq!(bits(&elementwise::add(&a, &b).unwrap().unwrap()), bits(&(&a + &b).unwrap()), "add");
    assert_eq!(bits(&elementwise::mul(&a, &b).unwrap().unwrap()), bits(&(&a * &b).unwrap()), "mul");
    let (x, bias) = (wide(&[2, 7, 512]), wide(&[512]));
    let got = elementwise::bias_add(&x, &bias).unwrap().unwrap();
    assert_eq!(bits(&got), bits(&x.broadcast_add(&bias).unwrap()), "bias");
    let x = wide(&[2, 9, 4 * 128]);
    let want = x.reshape((2, 9, 4, 128)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
    let got = elementwise::heads_first(&x, 4, 128).unwrap().unwrap();
    assert_eq!(got.dims(), want.dims());
    assert_eq!(bits(&got), bits(&want), "heads first");
    // v as a layer hands it to the cache: the heads-first view of [b, s, n, d] rows, made contiguous.
    let view = x.reshape((2, 9, 4, 128)).unwrap().transpose(1, 2).unwrap();
    let got = vram_lab::model::layers::elementwise::contiguous(&view).unwrap();
    assert_eq!(bits(&got), bits(&view.contiguous().unwrap()), "v for the cache");
    // silu over values from e^-16 to e^16 in size, both signs: e^−x overflows and underflows.
    let x = wide(&[4, 6, 256]);
    assert_eq!(bits(&elementwise::silu(&x).unwrap().unwrap()), bits(&candle_nn::ops::silu(&x).unwrap()), "silu");
    // The norm adds its squares in candle's order: rows of 1024, 3584 (Qwen2.5-7B) and 5120.
    for cols in [1024, 3584, 5120] {
        let (x, w) = (wide(&[3, 11, cols]), wide(&[cols]));
        let got = elementwise::rms_norm(&x, &w, 1e-6).unwrap().unwrap();
        assert_eq!(bits(&got), bits(&candle_nn::ops::rms_norm(&x, &w, 1e-6).unwrap()), "rms norm of {cols}");
    }
    let (x, w) = (wide(&[2, 896]), wide(&[896]));
    assert!(elementwise::rms_norm(&x, &w, 1e-6).unwrap().is_none(), "a row of 896: candle's one warp");
    let odd = wide(&[3, 5]);
    assert!(elementwise::add(&odd, &odd).unwrap().is_none(), "15 values");
    let view = a.narrow(2, 8, 32).unwrap();
    assert!(elementwise::mul(&view, &view).unwrap().is_none(), "a strided view");
    let f = randn(&[4, 8], DType::F32, &dev);
    assert!(elementwise::add(&f, &f).unwrap().is_none(), "F32");
    let var = candle_core::Var::from_tensor(&a).unwrap();
    assert!(elementwise::add(var.as_tensor(), &b).unwrap().is_none(), "a variable");
}
