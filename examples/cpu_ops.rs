use candle_core::{DType, Device, Tensor};
use std::time::Instant;
use vram_lab::model::attention::{attend, AttentionMode};
use vram_lab::model::host_linear::HostLinear;
fn t<F: FnMut()>(name: &str, mut f: F) {
    f();
    let n = 50;
    let s = Instant::now();
    for _ in 0..n { f(); }
    println!("{name:<12} {:>8.1} us", s.elapsed().as_secs_f64() / n as f64 * 1e6);
}
fn main() {
    let d = Device::Cpu;
    let bf = DType::BF16;
    let x = Tensor::randn(0f32, 1., (1, 1, 3584), &d).unwrap().to_dtype(bf).unwrap();
    let ln = Tensor::ones(3584, bf, &d).unwrap();
    t("rms_norm", || { candle_nn::ops::rms_norm(&x, &ln, 1e-6).unwrap(); });
    let q = Tensor::randn(0f32, 1., (1, 28, 1, 128), &d).unwrap().to_dtype(bf).unwrap();
    let cos = Tensor::randn(0f32, 1., (1, 64), &d).unwrap().to_dtype(bf).unwrap();
    t("rope", || { candle_nn::rotary_emb::rope(&q, &cos, &cos).unwrap(); });
    let k = Tensor::randn(0f32, 1., (1, 4, 512, 128), &d).unwrap().to_dtype(bf).unwrap();
    let kc = k.narrow(2, 0, 40).unwrap();
    t("attend", || { attend(&q, &kc, &kc, 39, AttentionMode::default()).unwrap(); });
    let (qf, kf) = (q.to_dtype(DType::F32).unwrap(), kc.to_dtype(DType::F32).unwrap());
    t("attend f32", || { attend(&qf, &kf, &kf, 39, AttentionMode::default()).unwrap(); });
    t("attend cvt", || { let (a,b)=(q.to_dtype(DType::F32).unwrap(), kc.to_dtype(DType::F32).unwrap()); attend(&a, &b, &b, 39, AttentionMode::default()).unwrap().to_dtype(bf).unwrap(); });
    let m = Tensor::randn(0f32, 1., (1, 1, 18944), &d).unwrap().to_dtype(bf).unwrap();
    t("silu*mul", || { (candle_nn::ops::silu(&m).unwrap() * &m).unwrap(); });
    t("add", || { (&x + &x).unwrap(); });
    let w = Tensor::randn(0f32, 1., (512, 3584), &d).unwrap().to_dtype(bf).unwrap();
    let b = Tensor::zeros(512, bf, &d).unwrap();
    let kl = HostLinear::new(w, Some(b)).unwrap();
    t("k_proj", || { kl.forward(&x).unwrap(); });
    let w = Tensor::randn(0f32, 1., (18944, 3584), &d).unwrap().to_dtype(bf).unwrap();
    let gl = HostLinear::new(w, None).unwrap();
    t("gate_proj", || { gl.forward(&x).unwrap(); });
    let kv = Tensor::zeros((1, 4, 512, 128), bf, &d).unwrap();
    let knew = Tensor::randn(0f32, 1., (1, 4, 1, 128), &d).unwrap().to_dtype(bf).unwrap();
    t("cache write", || { kv.slice_set(&knew, 2, 10).unwrap(); });
    let x3 = Tensor::randn(0f32, 1., (1, 1, 3584), &d).unwrap().to_dtype(bf).unwrap();
    t("reshape/tr", || { x3.reshape((1, 1, 28, 128)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap(); });
}
#[allow(dead_code)]
fn unused() {}
