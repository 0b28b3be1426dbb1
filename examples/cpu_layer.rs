use candle_core::Device;
use std::time::Instant;
use vram_lab::model::placement::{Home, Placement, Strategy};
use vram_lab::model::weights::{load_placed, Synthetic};
use vram_lab::model::{generate, GenerateConfig, Precision, Qwen2, Qwen2Config};
fn main() {
    let mut cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
    cfg.num_hidden_layers = 2;
    cfg.vocab_size = 1024;
    let p = Placement { strategy: Strategy::Split, embed: Home::Cpu, layers: vec![Home::Cpu; 2], head: Home::Gpu, slots: 0 };
    let mut src = Synthetic::new(cfg.clone(), 1);
    let t = Instant::now();
    let w = load_placed(&cfg, &mut src, Precision::Bf16, &Device::Cpu, |_| Device::Cpu, None, |_, _| Ok(())).unwrap();
    eprintln!("load {:.1}s", t.elapsed().as_secs_f64());
    let m = Qwen2::new_placed(&cfg, Precision::Bf16, w, &Device::Cpu, &p).unwrap();
    vram_lab::model::host_linear::take_counters();
    let g = generate(&m, &[1, 2, 3, 4], &GenerateConfig { max_new_tokens: 20, stop_at_eos: false, ..Default::default() }).unwrap();
    let per = 1.0 / g.decode_tok_s();
    let (ks, kb) = vram_lab::model::host_linear::take_counters();
    println!("kernel {:.2} ms per token at {:.1} GB/s", ks / 20.0 * 1e3, kb as f64 / ks / 1e9);
    println!("per token {:.2} ms; {:.1} GB/s of layer weights", per * 1e3, 2.0 * 466_115_584.0 / per / 1e9);
}
