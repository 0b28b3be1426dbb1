//! `estimate --engine llama.cpp`: what llama.cpp allocates for the same model, per device and
//! term by term (`crate::estimate::llamacpp`), for the file's own types or llama-quantize's.

use super::tables::{col, LLAMACPP, LLAMACPP_DEVICES};
use crate::error::{LabError, Result};
use crate::estimate::llamacpp::{self, process, CacheType, Launch};
use crate::limits;
use crate::memory::mib;
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::writer::{self, Planned};
use crate::model::gguf::Gguf;
use crate::model::DecoderConfig;
use crate::session::Session;
use crate::stage::{Finding, StageOutput};
use polars::prelude::*;
use serde::{Deserialize, Serialize};

/// llama.cpp's flags, and whose memory `estimate` prices.
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
pub struct LlamaCppFlags {
    /// Whose memory: the lab's runtime; llama.cpp's for the same GGUF at --seq (its -c) and the
    /// flags below; or transformers' in the report's KV-cache sweep up to --seq tokens
    #[arg(long, value_enum, default_value_t = Engine::Lab)]
    pub engine: Engine,
    /// --engine llama.cpp: the GGUF types to price a preset or config.json in (a GGUF file is
    /// priced in its own)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![FileType::Q4KM])]
    pub gguf_types: Vec<FileType>,
    /// --engine llama.cpp: -ngl, layers on the GPU counting the output (default: all)
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=limits::MAX_LAYERS as u64 + 1))]
    pub ngl: Option<usize>,
    /// --engine llama.cpp: -fa (default on)
    #[arg(long, value_enum)]
    pub fa: Option<Switch>,
    /// --engine llama.cpp: -ctk, the K cache's type (default f16)
    #[arg(long, value_enum)]
    pub ctk: Option<CacheType>,
    /// --engine llama.cpp: -ctv, the V cache's type (default f16)
    #[arg(long, value_enum)]
    pub ctv: Option<CacheType>,
    /// --engine llama.cpp: -b, the logical batch (default 2048)
    #[arg(long, value_parser = limits::count(limits::MAX_SEQ))]
    pub n_batch: Option<usize>,
    /// --engine llama.cpp: -ub, the micro-batch (default 512)
    #[arg(long, value_parser = limits::count(limits::MAX_SEQ))]
    pub ub: Option<usize>,
    /// --engine llama.cpp: llama-server's -np (its slots): the compute buffer is reserved for one
    /// output per slot (unset: llama-cli's, for every token of -b)
    #[arg(long, value_parser = limits::count(limits::MAX_BATCH))]
    #[serde(default)]
    pub np: Option<usize>,
    /// --engine llama.cpp: --n-cpu-moe, the experts of the first N layers in host memory
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=limits::MAX_LAYERS as u64))]
    #[serde(default)]
    pub n_cpu_moe: Option<usize>,
    /// --engine llama.cpp: --cpu-moe, every layer's experts in host memory
    #[arg(long)]
    #[serde(default)]
    pub cpu_moe: bool,
    /// --engine llama.cpp: -ot PATTERN=CPU (comma-separated, as llama.cpp takes them): the tensors
    /// whose names the pattern finds stay in host memory
    #[arg(long, value_delimiter = ',', value_parser = host_override)]
    #[serde(default)]
    pub override_tensor: Vec<String>,
    /// --engine llama.cpp: --swa-full, a windowed layer's cache (Gemma 3, gpt-oss) as large as the others'
    #[arg(long)]
    #[serde(default)]
    pub swa_full: bool,
    /// --engine llama.cpp: -ts, each GPU's share of the layers (`--split-mode layer`; with --cards
    /// one per card, whose free memory is the default share)
    #[arg(long, value_delimiter = ',', value_parser = share)]
    #[serde(default)]
    pub ts: Vec<f64>,
}

fn share(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("-ts {s:?}: a share is a number of 0 or more")),
    }
}

/// The layers' shares over the GPUs of `cards` (llama.cpp's `-ts`): `ts` as given, else each
/// card's memory less its CUDA context, as llama.cpp splits by the free memory it finds.
pub fn split(cards: &[String], ts: &[f64]) -> Result<Vec<f64>> {
    if cards.is_empty() {
        if ts.len() < 2 {
            return Err(LabError::input("--ts gives one share per GPU: two or more (or --cards)"));
        }
        return Ok(ts.to_vec());
    }
    if cards.len() < 2 {
        return Err(LabError::input("--cards names two cards or more (for one card, --card)"));
    }
    if !ts.is_empty() && ts.len() != cards.len() {
        return Err(LabError::input(format!("--ts gives {} shares for {} cards", ts.len(), cards.len())));
    }
    let cards = cards.iter().map(|n| crate::hw::Card::parse(n)).collect::<Result<Vec<_>>>()?;
    if !ts.is_empty() {
        return Ok(ts.to_vec());
    }
    // In MiB: what `-ts` is printed in.
    Ok(crate::estimate::parallel::shares_by_memory(&cards, process::CONTEXT).iter().map(|b| b / 1048576.0).collect())
}

/// One `-ot PATTERN=BUFFER`: its pattern when the buffer is the host's; other buffers (a GPU's,
/// CPU_REPACK) are not priced.
fn host_override(s: &str) -> std::result::Result<String, String> {
    match s.rsplit_once('=') {
        Some((pattern, "CPU")) if !pattern.is_empty() && pattern.len() <= 4096 => Ok(pattern.to_string()),
        Some((_, buffer)) if !buffer.is_empty() => {
            Err(format!("={buffer}: only =CPU is priced (llama.cpp's host memory)"))
        }
        _ => Err("expected PATTERN=CPU".into()),
    }
}

impl Default for LlamaCppFlags {
    fn default() -> Self {
        Self {
            engine: Engine::Lab,
            gguf_types: vec![FileType::Q4KM],
            ngl: None,
            fa: None,
            ctk: None,
            ctv: None,
            n_batch: None,
            ub: None,
            np: None,
            n_cpu_moe: None,
            cpu_moe: false,
            override_tensor: Vec::new(),
            swa_full: false,
            ts: Vec::new(),
        }
    }
}

/// Whose memory `estimate` prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Engine {
    /// The lab's own runtime (candle): what its stages measure.
    #[default]
    Lab,
    /// llama.cpp (llama-server, llama-cli, and what wraps them: ollama, LM Studio) on CUDA.
    #[value(name = "llama.cpp")]
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// transformers on PyTorch (the report's stack): `from_pretrained`, then the report's
    /// KV-cache sweep.
    #[serde(rename = "transformers")]
    Transformers,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Self::Lab => "lab",
            Self::LlamaCpp => "llama.cpp",
            Self::Transformers => "transformers",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    On,
    Off,
}

/// The launch `c` asks llama.cpp's memory for at `seq` (its -c); None for the other engines, which
/// refuse llama.cpp's flags by name. `others`: the estimator's flags llama.cpp's pricing has no
/// place for, and whether each was given.
pub fn launch(c: &LlamaCppFlags, seq: usize, others: &[(&str, bool)]) -> Result<Option<Launch>> {
    let given = [
        ("--ngl", c.ngl.is_some()),
        ("--fa", c.fa.is_some()),
        ("--ctk", c.ctk.is_some()),
        ("--ctv", c.ctv.is_some()),
        ("--n-batch", c.n_batch.is_some()),
        ("--ub", c.ub.is_some()),
        ("--np", c.np.is_some()),
        ("--n-cpu-moe", c.n_cpu_moe.is_some()),
        ("--cpu-moe", c.cpu_moe),
        ("--override-tensor", !c.override_tensor.is_empty()),
        ("--swa-full", c.swa_full),
        ("--ts", !c.ts.is_empty()),
        ("--gguf-types", c.gguf_types != LlamaCppFlags::default().gguf_types),
    ];
    if c.engine != Engine::LlamaCpp {
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            return Err(LabError::input(format!(
                "{flag} is a flag of --engine llama.cpp; --engine {} has no such setting",
                c.engine.name()
            )));
        }
    }
    if c.engine != Engine::Lab {
        for &(flag, set) in others {
            if set {
                return Err(LabError::input(format!(
                    "{flag} is not priced for --engine {} (one sequence, one GPU)",
                    c.engine.name()
                )));
            }
        }
    }
    if c.engine != Engine::LlamaCpp {
        return Ok(None);
    }
    let d = Launch::default();
    Ok(Some(Launch {
        ctx: seq,
        gpu_layers: c.ngl,
        flash: c.fa.map(|f| f == Switch::On).unwrap_or(d.flash),
        cache_k: c.ctk.unwrap_or(d.cache_k),
        cache_v: c.ctv.unwrap_or(d.cache_v),
        batch: c.n_batch.unwrap_or(d.batch),
        ubatch: c.ub.unwrap_or(d.ubatch),
        outputs: c.np,
        n_cpu_moe: c.n_cpu_moe,
        cpu_moe: c.cpu_moe,
        host_tensors: c.override_tensor.clone(),
        swa_full: c.swa_full,
        tensor_split: vec![],
    }))
}

/// Every tensor of a GGUF as llama.cpp's loader sees it.
fn file_tensors(g: &Gguf) -> Result<Vec<Planned>> {
    g.header
        .tensors
        .iter()
        .map(|t| {
            let ty = t.ggml_type().ok_or_else(|| {
                LabError::input(format!("{}: {} is not a type llama.cpp loads", t.name, t.type_name()))
            })?;
            Ok(Planned { name: t.name.clone(), ne: t.ne.clone(), ty })
        })
        .collect()
}

/// The tensors llama.cpp loads: a GGUF file's own, or a preset's in each of `types`, named.
pub fn priced(cfg: &DecoderConfig, gguf: Option<&Gguf>, types: &[FileType]) -> Result<Vec<(String, Vec<Planned>)>> {
    Ok(match gguf {
        Some(g) => vec![(g.header.str("general.name").unwrap_or("the GGUF file").to_string(), file_tensors(g)?)],
        None => types.iter().map(|t| (t.name().to_string(), writer::plan(cfg, writer::FileTypes::Llama(*t)))).collect(),
    })
}

pub fn llamacpp(
    s: &mut Session,
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    types: &[FileType],
    l: &Launch,
) -> Result<StageOutput> {
    let priced = priced(cfg, gguf, types)?;
    match cfg.sliding_window {
        Some(w) if llamacpp::windowed(cfg) => s.say(format!(
            "{}: {} of {} layers attend through a {w}-position window; llama.cpp keeps their cache apart, {}",
            cfg.model_type.name(),
            (0..cfg.num_hidden_layers).filter(|&il| cfg.is_swa(il)).count(),
            cfg.num_hidden_layers,
            if l.swa_full { "as large as the others' (--swa-full)" } else { "the window and one micro-batch long" }
        )),
        Some(w) => s.say(format!(
            "llama.cpp runs {} as its llama, whose graph has no {w}-position window: the KV cache keeps every cell of -c",
            cfg.model_type.name()
        )),
        None => {}
    }
    // (what, device, its buffers) per row; (what, device, its buffers, nvidia-smi's figure) per device.
    let mut rows: Vec<(String, &str, llamacpp::Buffers)> = Vec::new();
    let mut devices: Vec<(String, String, llamacpp::Buffers, Option<f64>)> = Vec::new();
    let mut out = StageOutput::default();
    for (what, tensors) in &priced {
        let m = llamacpp::memory(cfg, tensors, l)?;
        rows.extend([("gpu", m.gpu), ("host", m.host)].map(|(device, b)| (what.clone(), device, b)));
        // Each GPU runs a CUDA context, cuBLAS and a scratch pool of its own: the one-GPU figures.
        let b = process::beyond(cfg, l, llamacpp::mmq_weights(tensors), l.ctx as u64);
        let beyond = b.total();
        for (d, b) in m.gpus.iter().enumerate() {
            devices.push((what.clone(), format!("cuda{d}"), *b, Some(mib(b.total() + beyond))));
        }
        devices.push((what.clone(), "host".into(), m.host, None));
        if m.gpus.len() > 1 {
            let each: Vec<String> = m
                .gpus
                .iter()
                .enumerate()
                .map(|(d, b)| {
                    format!(
                        "cuda{d} {:.0} MiB ({:.0} as nvidia-smi would list it)",
                        mib(b.total()),
                        mib(b.total() + beyond)
                    )
                })
                .collect();
            s.say(format!(
                "llama.cpp over {} GPUs ({what}): {}{}; not yet measured on several GPUs (docs/llamacpp.md)",
                m.gpus.len(),
                each.join(", "),
                if m.pipeline { "; each split's inputs kept in 4 copies (pipeline parallelism)" } else { "" },
            ));
        }
        s.say(format!(
            "llama.cpp {} ({what}): GPU {:.2} MiB = model {:.2} + KV {:.2} ({} cells{}) + compute {:.2} ({} layers and {} the output on the GPU; {}-token micro-batch); host {:.2} MiB",
            l.flags(),
            mib(m.gpu.total()),
            mib(m.gpu.model),
            mib(m.gpu.context),
            m.cells,
            m.swa_cells.map(|c| format!(", {c} in the windowed layers")).unwrap_or_default(),
            mib(m.gpu.compute),
            m.gpu_layers,
            if m.output_on_gpu { "with" } else { "without" },
            m.tokens,
            mib(m.host.total()),
        ));
        out.findings.push(
            Finding::new(format!("llama.cpp {what}: GPU buffers at {}", l.flags()), "MiB", None)
                .predicted(mib(m.gpu.total()))
                .note("model + KV cache + compute buffer, as llama.cpp's memory breakdown counts them (its 'self'); the CUDA context and its pools come beside it"),
        );
        // And the whole process as nvidia-smi would list it, for the same buffers (one GPU's; over
        // several, each GPU's line above).
        if m.gpus.len() > 1 {
            continue;
        }
        let gpu = m.gpu.total();
        s.say(format!(
            "llama.cpp {what}: nvidia-smi after a prompt filling -c {}: {:.0} MiB = the buffers + the CUDA context {:.0} + cuBLAS {:.0} + the scratch pool {:.0} (the H200's context; docs/accuracy.md)",
            l.ctx,
            mib(gpu + b.total()),
            mib(b.context),
            mib(b.cublas),
            mib(b.pool)
        ));
        out.findings.push(
            Finding::new(format!("llama.cpp {what}: the process as nvidia-smi lists it, a full prompt"), "MiB", None)
                .predicted(mib(gpu + b.total()))
                .note("the GPU buffers, the CUDA context and kernels, cuBLAS once used, ggml-cuda's scratch pool"),
        );
    }
    out.table(
        LLAMACPP_DEVICES,
        df!(
            col::MODEL => devices.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            col::DEVICE => devices.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
            col::MODEL_MIB => devices.iter().map(|r| mib(r.2.model)).collect::<Vec<_>>(),
            col::CONTEXT_MIB => devices.iter().map(|r| mib(r.2.context)).collect::<Vec<_>>(),
            col::COMPUTE_MIB => devices.iter().map(|r| mib(r.2.compute)).collect::<Vec<_>>(),
            col::PREDICTED_NVIDIA_SMI_MIB => devices.iter().map(|r| r.3).collect::<Vec<_>>(),
        )?,
    );
    out.table(
        LLAMACPP,
        df!(
            col::MODEL => rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            col::DEVICE => rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            col::MODEL_MIB => rows.iter().map(|r| mib(r.2.model)).collect::<Vec<_>>(),
            col::CONTEXT_MIB => rows.iter().map(|r| mib(r.2.context)).collect::<Vec<_>>(),
            col::COMPUTE_MIB => rows.iter().map(|r| mib(r.2.compute)).collect::<Vec<_>>(),
            col::TOTAL_MIB => rows.iter().map(|r| mib(r.2.total())).collect::<Vec<_>>(),
        )?,
    );
    Ok(out)
}
