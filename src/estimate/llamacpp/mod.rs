//! The memory llama.cpp takes for a GGUF (`--engine llama.cpp`), per device and term by term as
//! it allocates it: the model buffers (`llama_model::load_tensors`: the input layer on the host,
//! the last `-ngl` layers and the output on the GPU, or over several GPUs by `-ts` (`devices`),
//! each tensor padded as the CUDA buffer type pads it, the tensors `-ot`, `--cpu-moe` and
//! `--n-cpu-moe` name on the host), the KV cache
//! (`llama_kv_cache`: `-c` rounded up to 256 cells, each layer on its layer's device, in
//! `-ctk`/`-ctv`), and the compute buffers (`graph`, `alloc`: ggml's allocator
//! replayed over the graph llama.cpp reserves). Source read: llama.cpp as
//! `scripts/reference/llama_memory.sh` builds it.

pub mod alloc;
pub mod devices;
pub mod graph;
pub mod process;
pub mod sched;

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::gguf::types::GgmlType;
use crate::model::gguf::writer::Planned;
pub use graph::windowed;
use serde::{Deserialize, Serialize};

/// The KV-cache types llama.cpp's `-ctk`/`-ctv` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum CacheType {
    F32,
    F16,
    Bf16,
    #[value(name = "q8_0")]
    #[serde(rename = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    #[serde(rename = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    #[serde(rename = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    #[serde(rename = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    #[serde(rename = "q5_1")]
    Q5_1,
}

impl CacheType {
    pub fn ggml(self) -> GgmlType {
        use candle_core::quantized::GgmlDType as D;
        GgmlType::of(match self {
            Self::F32 => D::F32,
            Self::F16 => D::F16,
            Self::Bf16 => D::BF16,
            Self::Q8_0 => D::Q8_0,
            Self::Q4_0 => D::Q4_0,
            Self::Q4_1 => D::Q4_1,
            Self::Q5_0 => D::Q5_0,
            Self::Q5_1 => D::Q5_1,
        })
    }

    pub fn is_quantized(self) -> bool {
        self.ggml().block > 1
    }
}

/// The flags of one llama.cpp launch that decide its memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Launch {
    /// `-c`
    pub ctx: usize,
    /// `-ngl`; None: every layer and the output (`-ngl 99`, llama.cpp's default).
    pub gpu_layers: Option<usize>,
    /// `-fa on|off`
    pub flash: bool,
    pub cache_k: CacheType,
    pub cache_v: CacheType,
    /// `-b`, `-ub`
    pub batch: usize,
    pub ubatch: usize,
    /// The outputs the compute buffer is reserved for (`n_outputs_max`): None for `-b`, as
    /// llama-completion reserves; llama-server reserves one per slot (`-np`).
    pub outputs: Option<usize>,
    /// `--n-cpu-moe N`: the experts of the first N layers in host memory.
    #[serde(default)]
    pub n_cpu_moe: Option<usize>,
    /// `--cpu-moe`: every layer's experts in host memory.
    #[serde(default)]
    pub cpu_moe: bool,
    /// `-ot PATTERN=CPU`, one pattern each: the tensors whose names the pattern finds stay in host
    /// memory.
    #[serde(default)]
    pub host_tensors: Vec<String>,
    /// `--swa-full`: a windowed layer's cache as large as the others'.
    #[serde(default)]
    pub swa_full: bool,
    /// `-ts`, one share a GPU (`--split-mode layer`); empty for one GPU.
    #[serde(default)]
    pub tensor_split: Vec<f64>,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            ctx: 4096,
            gpu_layers: None,
            flash: true,
            cache_k: CacheType::F16,
            cache_v: CacheType::F16,
            batch: 2048,
            ubatch: 512,
            outputs: None,
            n_cpu_moe: None,
            cpu_moe: false,
            host_tensors: Vec::new(),
            swa_full: false,
            tensor_split: Vec::new(),
        }
    }
}

impl Launch {
    /// The flags as llama.cpp spells them.
    pub fn flags(&self) -> String {
        let ngl = self.gpu_layers.map(|n| n.to_string()).unwrap_or_else(|| "99".into());
        let name = |t: CacheType| t.ggml().name.to_ascii_lowercase();
        let slots = self.outputs.map(|n| format!(" -np {n}")).unwrap_or_default();
        let mut host = String::new();
        if self.cpu_moe {
            host += " --cpu-moe";
        }
        if let Some(n) = self.n_cpu_moe {
            host += &format!(" --n-cpu-moe {n}");
        }
        for p in &self.host_tensors {
            host += &format!(" -ot '{p}=CPU'");
        }
        if self.swa_full {
            host += " --swa-full";
        }
        if self.tensor_split.len() > 1 {
            let shares: Vec<String> = self.tensor_split.iter().map(|s| s.to_string()).collect();
            host += &format!(" -sm layer -ts {}", shares.join(","));
        }
        format!(
            "-c {} -ngl {ngl} -fa {} -ctk {} -ctv {} -b {} -ub {}{slots}{host}",
            self.ctx,
            if self.flash { "on" } else { "off" },
            name(self.cache_k),
            name(self.cache_v),
            self.batch,
            self.ubatch
        )
    }

    /// Whether the tensor `name` of layer `layer` stays in host memory whatever `-ngl` says, as
    /// llama.cpp's `common` turns `--cpu-moe`, `--n-cpu-moe` and `-ot` into patterns searched in
    /// tensor names (`std::regex_search`): `--cpu-moe` is `LLM_FFN_EXPS_REGEX`, `--n-cpu-moe N`
    /// that pattern after `blk\.i` for each layer i below N (`llm_ffn_block_regex`).
    pub fn host_rule(&self) -> Result<impl Fn(&str, Option<usize>) -> bool> {
        let pattern = |t: &str| {
            regex::RegexBuilder::new(t)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| LabError::input(format!("-ot {t:?}: not a pattern llama.cpp would take here: {e}")))
        };
        let exps = pattern(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")?;
        let patterns = self.host_tensors.iter().map(|t| pattern(t)).collect::<Result<Vec<_>>>()?;
        let (all, first) = (self.cpu_moe, self.n_cpu_moe.unwrap_or(0));
        Ok(move |name: &str, layer: Option<usize>| {
            let expert = exps.is_match(name);
            (expert && (all || layer.is_some_and(|i| i < first))) || patterns.iter().any(|p| p.is_match(name))
        })
    }
}

/// One device's buffers, as llama.cpp's memory breakdown names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Buffers {
    pub model: u64,
    /// The KV cache (llama.cpp's "context").
    pub context: u64,
    pub compute: u64,
}

impl Buffers {
    /// llama.cpp's "self": what it allocated itself.
    pub fn total(&self) -> u64 {
        self.model + self.context + self.compute
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// Every GPU's buffers together (the one GPU's, for one).
    pub gpu: Buffers,
    /// Each GPU's, in `-ts` order (`cuda0`, `cuda1`, …).
    pub gpus: Vec<Buffers>,
    pub host: Buffers,
    /// Repeating layers on the GPUs, and whether the output layer is on one.
    pub gpu_layers: usize,
    pub output_on_gpu: bool,
    /// Pipeline parallelism: several GPUs holding every layer, each split's inputs kept in
    /// `PIPELINE_COPIES` copies.
    pub pipeline: bool,
    /// KV cells (`-c` rounded up to 256) and the reserved micro-batch.
    pub cells: u64,
    /// The windowed layers' cells (Gemma 3), when there are any.
    pub swa_cells: Option<u64>,
    pub tokens: u64,
}

/// The copies ggml's scheduler keeps of each split's inputs under pipeline parallelism
/// (`GGML_SCHED_MAX_COPIES`).
const PIPELINE_COPIES: u64 = 4;
/// CUDA buffers align every tensor to 128 B (`ggml_backend_cuda_buffer_type_get_alignment`).
const CUDA_ALIGNMENT: u64 = 128;
/// A quantized matrix's rows are padded to 512 values on the GPU (`MATRIX_ROW_PADDING`).
const MATRIX_ROW_PADDING: u64 = 512;
/// llama.cpp rounds the context up to this many cells.
const CTX_PAD: u64 = 256;

fn pad(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Bytes of `ty` for `elems` values (whole blocks).
fn type_bytes(ty: GgmlType, elems: u64) -> u64 {
    elems.div_ceil(ty.block) * ty.bytes
}

/// What the CUDA buffer type allocates for a tensor (`ggml_backend_cuda_buffer_type_get_alloc_size`
/// padded to the alignment).
fn cuda_alloc(t: &Planned) -> u64 {
    let mut size = t.bytes();
    let ne0 = t.ne.first().copied().unwrap_or(1);
    if t.ty.block > 1 && !ne0.is_multiple_of(MATRIX_ROW_PADDING) {
        size += type_bytes(t.ty, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING);
    }
    pad(size, CUDA_ALIGNMENT)
}

/// Whether the model's widest products (the MLP's down projection) run through ggml's quantized
/// kernels (MMQ) rather than cuBLAS: true for every block-quantized type.
pub fn mmq_weights(tensors: &[Planned]) -> bool {
    tensors.iter().find(|t| t.name.ends_with("ffn_down.weight")).is_some_and(|t| t.ty.block > 1)
}

/// Which layer a GGUF tensor belongs to: `blk.N.` → N, the output layer's → `layers`, the token
/// embedding → None (the input layer, always on the host).
fn layer_of(name: &str, layers: usize) -> Option<usize> {
    if let Some(rest) = name.strip_prefix("blk.") {
        return rest.split('.').next().and_then(|n| n.parse().ok());
    }
    (name != "token_embd.weight").then_some(layers)
}

/// The MMA flash-attention kernel reads a quantized cache through F16 copies it makes inside its
/// output's allocation (`ggml_cuda_flash_attn_ext_get_alloc_size`): on the GPU only.
fn flash_copies_on_gpu(g: &mut graph::Graph, s: &graph::Shape) {
    for t in g.tensors.iter_mut().filter(|t| t.fa_cells > 0 && graph::is_gpu(t.backend)) {
        if s.k_quantized {
            t.size = pad(t.size, CUDA_ALIGNMENT) + 2 * t.fa_cells;
        }
        if s.v_quantized {
            t.size = pad(t.size, CUDA_ALIGNMENT) + 2 * t.fa_cells;
        }
    }
}

/// llama.cpp's memory for `cfg` stored as `tensors` (a GGUF's, or a recipe's plan) under `l`.
pub fn memory(cfg: &DecoderConfig, tensors: &[Planned], l: &Launch) -> Result<Memory> {
    if (l.cpu_moe || l.n_cpu_moe.is_some()) && cfg.experts().is_none() {
        return Err(LabError::input(format!(
            "--cpu-moe and --n-cpu-moe place a mixture's experts; {} has none",
            cfg.model_type.name()
        )));
    }
    if l.cache_v.is_quantized() && !l.flash {
        return Err(LabError::input(format!(
            "-ctv {:?}: llama.cpp refuses a quantized V cache without flash attention (-fa on)",
            l.cache_v
        )));
    }
    if l.ctx == 0 || l.batch == 0 || l.ubatch == 0 {
        return Err(LabError::input("--engine llama.cpp: -c, -b and -ub are at least 1"));
    }
    let layers = cfg.num_hidden_layers;
    let ngl = l.gpu_layers.unwrap_or(layers + 1).min(layers + 1);
    let n_gpus = l.tensor_split.len().max(1);
    if n_gpus > graph::MAX_GPUS {
        return Err(LabError::input(format!("-ts names {n_gpus} GPUs; the lab prices up to {}", graph::MAX_GPUS)));
    }
    let shares = if l.tensor_split.is_empty() { vec![1.0] } else { l.tensor_split.clone() };
    // Each layer's backend, the output layer's last: a GPU's index, or the host.
    let slots: Vec<usize> =
        devices::layer_devices(layers, ngl, &shares)?.into_iter().map(|d| d.unwrap_or(graph::CPU)).collect();
    let home_of = |layer: Option<usize>| layer.map_or(graph::CPU, |i| slots[i]);
    let kept_on_host = l.host_rule()?;

    let mut gpus = vec![Buffers::default(); n_gpus];
    let mut host = Buffers::default();
    // Each layer's weight by its short name: where it lives, and its bytes in a CUDA buffer (what
    // it takes there, or what a copy onto a GPU takes).
    let mut weight = std::collections::HashMap::new();
    for t in tensors {
        let layer = layer_of(&t.name, layers);
        let home = if kept_on_host(&t.name, layer) { graph::CPU } else { home_of(layer) };
        match gpus.get_mut(home) {
            Some(g) => g.model += cuda_alloc(t),
            None => host.model += t.bytes(),
        }
        if let Some(i) = layer {
            let short = t.name.trim_start_matches(&format!("blk.{i}.")).trim_end_matches(".weight");
            weight.insert((i, short.to_string()), (home, cuda_alloc(t)));
        }
    }
    // A tied head: llama.cpp loads the token embedding a second time as the output layer.
    if !tensors.iter().any(|t| t.name == "output.weight") {
        if let Some(embd) = tensors.iter().find(|t| t.name == "token_embd.weight") {
            let home = if kept_on_host("output.weight", None) { graph::CPU } else { slots[layers] };
            if let Some(g) = gpus.get_mut(home) {
                g.model += cuda_alloc(embd);
            }
            weight.insert((layers, "output".into()), (home, cuda_alloc(embd)));
        }
    }

    let cells = pad(l.ctx as u64, CTX_PAD);
    let ubatch = l.ubatch.min(l.batch) as u64;
    let swa_cells = graph::windowed(cfg).then(|| if l.swa_full { cells } else { swa_cells(cfg, cells, ubatch) });
    let cells_of = |il: usize| match swa_cells {
        Some(c) if cfg.is_swa(il) => c,
        _ => cells,
    };
    let kv = cfg.kv_dim() as u64;
    let (k_row, v_row) = (type_bytes(l.cache_k.ggml(), kv), type_bytes(l.cache_v.ggml(), kv));
    for (il, &slot) in slots[..layers].iter().enumerate() {
        let c = cells_of(il);
        match gpus.get_mut(slot) {
            Some(g) => g.context += pad(k_row * c, CUDA_ALIGNMENT) + pad(v_row * c, CUDA_ALIGNMENT),
            None => host.context += (k_row + v_row) * c,
        }
    }

    let tokens = ubatch.min(cells);
    let shape = graph::Shape {
        tokens,
        outputs: l.outputs.unwrap_or(l.batch) as u64,
        kv_cells: cells,
        swa_cells: swa_cells.unwrap_or(cells),
        flash: l.flash,
        k_row,
        v_row,
        k_quantized: l.cache_k.is_quantized(),
        v_quantized: l.cache_v.is_quantized(),
        k_rot: rotation(l.cache_k, cfg.head_dim() as u64, true),
        v_rot: rotation(l.cache_v, cfg.head_dim() as u64, false),
        layer_backend: slots.clone(),
    };
    let bytes = |i: usize, name: &str| weight.get(&(i, name.to_string())).copied().unwrap_or((slots[i], 0));
    let mut g = graph::build(cfg, &shape, &bytes);
    sched::assign(&mut g);
    sched::keep_fused(&mut g);
    flash_copies_on_gpu(&mut g, &shape);
    // Pipeline parallelism (`llama_context`): several GPUs holding every layer and the output,
    // nothing overridden onto the host.
    let overridden = l.cpu_moe || l.n_cpu_moe.is_some_and(|n| n > 0) || !l.host_tensors.is_empty();
    let pipeline = n_gpus > 1 && ngl > layers && !overridden;
    let g = sched::with_copies(g, if pipeline { PIPELINE_COPIES } else { 1 }, CUDA_ALIGNMENT);
    let high = alloc::reserve(&g, graph::CPU + 1, CUDA_ALIGNMENT);
    // Even with -ngl 0 a CUDA build offloads the prompt's large products (op offload).
    for (d, b) in gpus.iter_mut().enumerate() {
        b.compute = high[d];
    }
    host.compute = high[graph::CPU];
    let gpu = gpus.iter().fold(Buffers::default(), |a, b| Buffers {
        model: a.model + b.model,
        context: a.context + b.context,
        compute: a.compute + b.compute,
    });
    Ok(Memory {
        gpu,
        gpus,
        host,
        gpu_layers: slots[..layers].iter().filter(|&&b| graph::is_gpu(b)).count(),
        output_on_gpu: graph::is_gpu(slots[layers]),
        pipeline,
        cells,
        swa_cells,
        tokens,
    })
}

/// The side of the Hadamard matrix llama.cpp rotates a quantized cache's rows by (`llama_kv_cache`:
/// heads whose size is a multiple of 64; K by the largest power of two from 64 that divides it, V
/// by 64), 0 for a cache it leaves alone.
fn rotation(cache: CacheType, head: u64, k: bool) -> u64 {
    if !cache.is_quantized() || !head.is_multiple_of(64) {
        return 0;
    }
    if !k {
        return 64;
    }
    let mut n = 64;
    while head.is_multiple_of(n * 2) {
        n *= 2;
    }
    n
}

/// The windowed cache's cells (`llama_kv_cache_iswa`): the window and one micro-batch, padded
/// to 256 and never above the full cache (llama.cpp's default: one sequence's window, the cache
/// not unified across slots).
fn swa_cells(cfg: &DecoderConfig, cells: u64, ubatch: u64) -> u64 {
    let window = cfg.sliding_window.unwrap_or(0) as u64;
    pad(cells.min(window + ubatch), CTX_PAD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::recipe::FileType;
    use crate::model::gguf::writer::{plan, FileTypes};

    fn qwen7b(ftype: FileType) -> (DecoderConfig, Vec<Planned>) {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let tensors = plan(&cfg, FileTypes::Llama(ftype));
        (cfg, tensors)
    }

    /// The KV cache is `-c` rounded up to 256 cells × 2 × layers × the KV width in the cache's
    /// type: Qwen2.5-7B at -c 4000 holds 4,096 cells of 28 × 512 values, F16 2 B and Q8_0
    /// 34 B per 32.
    #[test]
    fn kv_cache_in_cells_of_256_and_the_cache_type() {
        let (cfg, t) = qwen7b(FileType::Q4KM);
        let m = memory(&cfg, &t, &Launch { ctx: 4000, ..Launch::default() }).unwrap();
        assert_eq!(m.cells, 4096);
        assert_eq!(m.gpu.context, 2 * 28 * 512 * 2 * 4096);
        let q8 = Launch { ctx: 4000, cache_k: CacheType::Q8_0, cache_v: CacheType::Q8_0, ..Launch::default() };
        assert_eq!(memory(&cfg, &t, &q8).unwrap().gpu.context, 2 * 28 * (512 / 32 * 34) * 4096);
    }

    /// -ngl N puts the last N − 1 layers and the output on the GPU; the token embedding never.
    #[test]
    fn gpu_layers_count_from_the_top_with_the_output() {
        let (cfg, t) = qwen7b(FileType::Q8_0);
        let all = memory(&cfg, &t, &Launch::default()).unwrap();
        let embd = t.iter().find(|x| x.name == "token_embd.weight").unwrap().bytes();
        assert_eq!(all.host.model, embd);
        assert_eq!((all.gpu_layers, all.output_on_gpu), (28, true));
        let part = memory(&cfg, &t, &Launch { gpu_layers: Some(14), ..Launch::default() }).unwrap();
        assert_eq!((part.gpu_layers, part.output_on_gpu), (13, true));
        assert_eq!(part.gpu.context * 28, all.gpu.context * 13);
        let none = memory(&cfg, &t, &Launch { gpu_layers: Some(0), ..Launch::default() }).unwrap();
        assert_eq!((none.gpu.model, none.gpu.context, none.gpu_layers), (0, 0, 0));
    }

    /// Flash attention holds no score matrix: off, the compute buffer grows with the context
    /// (n_kv × tokens × heads × 4 B of scores); on, it is the logits' moment (vocab × tokens ×
    /// 4 B) until a quantized cache's F16 copies for one layer (2 × n_kv × 512 × 2 B) top it.
    #[test]
    fn compute_buffer_grows_with_context_only_without_flash_attention() {
        let (cfg, t) = qwen7b(FileType::Q4KM);
        let at = |ctx: usize, flash: bool, k: CacheType| {
            memory(&cfg, &t, &Launch { ctx, flash, cache_k: k, cache_v: k, ..Launch::default() }).unwrap().gpu.compute
        };
        let scores = |ctx: u64| ctx * 512 * 28 * 4;
        let logits = 152_064 * 512 * 4;
        let off = at(32768, false, CacheType::F16);
        assert!(off >= scores(32768) && off < scores(32768) + (512 << 20), "{off}");
        for ctx in [4096, 32768, 131072] {
            let on = at(ctx, true, CacheType::F16);
            assert!(on >= logits && on < logits + (16 << 20), "{ctx}: {on}");
        }
        let copies = 2 * 2 * 512 * 131072;
        assert!(at(131072, true, CacheType::Q8_0) > logits.max(copies));
        assert!(memory(&cfg, &t, &Launch { flash: false, cache_v: CacheType::Q8_0, ..Launch::default() }).is_err());
    }

    fn qwen3_moe() -> (DecoderConfig, Vec<Planned>) {
        let cfg = DecoderConfig::preset("qwen3-30b-a3b").unwrap();
        let tensors = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
        (cfg, tensors)
    }

    /// `--n-cpu-moe N` moves the first N layers' three expert tensors to the host and nothing else;
    /// `--cpu-moe` and `-ot exps=CPU` move every layer's, as `--n-cpu-moe` of every layer does.
    #[test]
    fn experts_on_the_host_by_layer_or_pattern() {
        let (cfg, t) = qwen3_moe();
        let at = |l: Launch| memory(&cfg, &t, &l).unwrap();
        let all = at(Launch::default());
        let exps = |first: usize| -> u64 {
            t.iter()
                .filter(|x| x.name.contains("_exps.") && layer_of(&x.name, 48).is_some_and(|i| i < first))
                .map(cuda_alloc)
                .sum()
        };
        let twenty = at(Launch { n_cpu_moe: Some(20), ..Launch::default() });
        assert_eq!(all.gpu.model - twenty.gpu.model, exps(20));
        assert!(exps(20) > 0);
        let every = at(Launch { cpu_moe: true, ..Launch::default() });
        assert_eq!(all.gpu.model - every.gpu.model, exps(48));
        let pattern = at(Launch { host_tensors: vec!["exps".into()], ..Launch::default() });
        assert_eq!(pattern.gpu, every.gpu);
        assert_eq!(at(Launch { n_cpu_moe: Some(48), ..Launch::default() }).gpu.model, every.gpu.model);
        // The router and attention stay: what is left on the GPU is more than the embedding-free rest.
        assert!(every.gpu.model > 0);
    }

    /// A copy of one layer's host experts goes through the GPU's compute buffer when a
    /// micro-batch is large enough for llama.cpp to offload the product (32 rows); with fewer
    /// rows the experts are multiplied on the host and the GPU holds no copy.
    #[test]
    fn host_experts_are_copied_for_large_micro_batches_only() {
        let (cfg, t) = qwen3_moe();
        let down: u64 = t.iter().filter(|x| x.name.ends_with("ffn_down_exps.weight")).map(cuda_alloc).max().unwrap();
        let l = Launch { cpu_moe: true, ctx: 4096, ubatch: 512, outputs: Some(1), ..Launch::default() };
        let big = memory(&cfg, &t, &l).unwrap();
        assert!(big.gpu.compute >= down, "{} < {down}", big.gpu.compute);
        let small = memory(&cfg, &t, &Launch { ubatch: 16, ..l }).unwrap();
        assert!(small.gpu.compute < down, "{} >= {down}", small.gpu.compute);
    }

    #[test]
    fn expert_flags_on_a_dense_model_and_bad_patterns_are_refused() {
        let (cfg, t) = qwen7b(FileType::Q4KM);
        let e = memory(&cfg, &t, &Launch { n_cpu_moe: Some(4), ..Launch::default() }).unwrap_err().to_string();
        assert!(e.contains("--n-cpu-moe") && e.contains("none"), "{e}");
        let e = memory(&cfg, &t, &Launch { host_tensors: vec!["ffn_(up".into()], ..Launch::default() }).unwrap_err();
        assert!(e.to_string().contains("-ot"), "{e}");
        // A dense model's tensors matched by -ot stay on the host all the same.
        let ffn =
            memory(&cfg, &t, &Launch { host_tensors: vec![r"blk\.0\.ffn_up".into()], ..Launch::default() }).unwrap();
        let up0 = t.iter().find(|x| x.name == "blk.0.ffn_up.weight").unwrap();
        assert_eq!(memory(&cfg, &t, &Launch::default()).unwrap().gpu.model - ffn.gpu.model, cuda_alloc(up0));
    }

    /// Gemma 3's windowed layers keep the window and one micro-batch, padded to 256 (1,024 +
    /// 512 = 1,536 cells at -c 32768), its global layers (8 of 48) every cell; `--swa-full` and
    /// a context shorter than the window give every layer the whole cache.
    #[test]
    fn gemma3_keeps_a_windowed_cache_beside_the_full_one() {
        let cfg = DecoderConfig::preset("gemma-3-12b").unwrap();
        let t = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
        let row = 2 * 8 * 256; // K or V, F16: 8 KV heads of 256
        let at = |l: Launch| memory(&cfg, &t, &l).unwrap();
        let m = at(Launch { ctx: 32768, ..Launch::default() });
        assert_eq!(m.swa_cells, Some(1536));
        assert_eq!(m.gpu.context, 2 * row * (8 * 32768 + 40 * 1536));
        let full = at(Launch { ctx: 32768, swa_full: true, ..Launch::default() });
        assert_eq!(full.gpu.context, 2 * row * 48 * 32768);
        let big_ub = at(Launch { ctx: 32768, ubatch: 2048, ..Launch::default() });
        assert_eq!(big_ub.swa_cells, Some(3072));
        let short = at(Launch { ctx: 1000, ..Launch::default() });
        assert_eq!((short.cells, short.swa_cells), (1024, Some(1024)));
        // Without flash attention the scores of a global layer are the widest: the compute
        // buffer follows the full cache, not the window.
        let off = at(Launch { ctx: 32768, flash: false, ..Launch::default() });
        assert!(off.gpu.compute >= 32768 * 512 * 16 * 4, "{}", off.gpu.compute);
    }

    /// gpt-oss-20b as ggml-org publishes it (MXFP4_MOE): its 12 windowed layers keep 128 + 512
    /// cells padded to 768, its 12 global ones every cell, 8 KV heads of 64.
    #[test]
    fn gpt_oss_windows_every_other_layer() {
        let cfg = DecoderConfig::preset("gpt-oss-20b").unwrap();
        let t = plan(&cfg, FileTypes::Llama(FileType::Mxfp4Moe));
        let m = memory(&cfg, &t, &Launch { ctx: 32768, ..Launch::default() }).unwrap();
        assert_eq!(m.swa_cells, Some(768));
        let row = 2 * 8 * 64;
        assert_eq!(m.gpu.context, 2 * row * (12 * 32768 + 12 * 768));
        // Experts in MXFP4 (17 B per 32), every other matrix Q8_0: about 12 GB on the GPU.
        let exps: u64 = t.iter().filter(|x| x.ty.name == "MXFP4").map(Planned::bytes).sum();
        assert_eq!(exps, 24 * 3 * 32 * 2880 * 2880 / 32 * 17);
        assert!(m.gpu.model > exps && m.gpu.model < exps + (2 << 30), "{}", m.gpu.model);
    }

    /// A host layer's attention reads its sinks, a weight in host memory: llama.cpp offloads the
    /// prompt's attention to the GPU all the same (op offload), so the GPU's compute buffer holds
    /// a copy of a host layer's K and V; a model without sinks attends on the host.
    #[test]
    fn gpt_oss_attends_on_the_gpu_for_host_layers() {
        let cfg = DecoderConfig::preset("gpt-oss-20b").unwrap();
        let t = plan(&cfg, FileTypes::Llama(FileType::Mxfp4Moe));
        let l = Launch { ctx: 65536, gpu_layers: Some(13), ..Launch::default() };
        let part = memory(&cfg, &t, &l).unwrap();
        let full_layer_kv = 2 * 2 * 8 * 64 * 65536;
        assert!(part.gpu.compute >= full_layer_kv, "{} < {full_layer_kv}", part.gpu.compute);
    }

    /// Two GPUs as `-sm layer -ts 1,1` places Qwen2.5-7B: layers 0-14 on cuda0, 15-27 and the
    /// output on cuda1, each layer's cache with it; the buffers of one GPU split between them.
    /// With every layer on the GPUs llama.cpp runs a pipeline, keeping 4 copies of each split's
    /// inputs: cuda1's compute buffer holds at least 3 more copies of the hidden state it receives
    /// (512 tokens × 3,584 × 4 B) than with an override, which turns the pipeline off.
    #[test]
    fn two_gpus_split_the_layers_and_keep_pipeline_copies() {
        let (cfg, t) = qwen7b(FileType::Q4KM);
        let one = memory(&cfg, &t, &Launch::default()).unwrap();
        let two = Launch { tensor_split: vec![1.0, 1.0], ..Launch::default() };
        let m = memory(&cfg, &t, &two).unwrap();
        assert_eq!(m.gpus.len(), 2);
        assert!(m.pipeline && !one.pipeline);
        assert_eq!(m.gpu.model, one.gpu.model);
        assert_eq!(m.gpu.context, one.gpu.context);
        assert_eq!(m.gpus[0].context * 13, m.gpus[1].context * 15);
        let output = t.iter().find(|x| x.name == "output.weight").map(cuda_alloc).unwrap();
        assert!(m.gpus[1].model > output && m.gpus[0].model + output > m.gpus[1].model);
        let plain = Launch { host_tensors: vec!["nothing_matches".into()], ..two.clone() };
        let p = memory(&cfg, &t, &plain).unwrap();
        assert!(!p.pipeline);
        let hidden = 512 * 3584 * 4;
        assert!(m.gpus[1].compute >= p.gpus[1].compute + 3 * hidden, "{} vs {}", m.gpus[1].compute, p.gpus[1].compute);
        // -ngl 10 over two GPUs: no pipeline, the first 19 layers' caches on the host.
        let part = memory(&cfg, &t, &Launch { gpu_layers: Some(10), ..two }).unwrap();
        assert!(!part.pipeline);
        assert_eq!(part.gpu_layers, 9);
        assert_eq!(part.gpus[0].context + part.gpus[1].context, one.gpu.context * 9 / 28);
    }

    /// A quantized K cache rotates by the largest power of two from 64 that divides the head, a
    /// quantized V cache by 64; an F16 cache, or a head that is no multiple of 64, not at all.
    #[test]
    fn a_quantized_cache_rotates_by_its_hadamard_side() {
        assert_eq!(rotation(CacheType::Q8_0, 256, true), 256);
        assert_eq!(rotation(CacheType::Q4_0, 128, true), 128);
        assert_eq!(rotation(CacheType::Q8_0, 192, true), 64);
        assert_eq!(rotation(CacheType::Q8_0, 256, false), 64);
        assert_eq!(rotation(CacheType::F16, 128, true), 0);
        assert_eq!(rotation(CacheType::Q8_0, 96, true), 0);
    }

    /// Mistral v0.1's window does not shrink llama.cpp's cache: its llama graph attends to every
    /// cell, so -c 32768 holds 32,768 cells of 8 × 128 values in 32 layers.
    #[test]
    fn mistral_v01_keeps_the_whole_cache() {
        let cfg = DecoderConfig::preset("mistral-7b-v0.1").unwrap();
        assert_eq!(cfg.sliding_window, Some(4096));
        let t = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
        let m = memory(&cfg, &t, &Launch { ctx: 32768, ..Launch::default() }).unwrap();
        assert_eq!(m.gpu.context, 2 * 32 * 1024 * 2 * 32768);
    }
}
