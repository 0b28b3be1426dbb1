//! Several GPUs, tensor-parallel (the related articles' multi-GPU notes): the model split over N
//! ranks (Megatron's split, `model::parallel`), one thread per GPU joined by NCCL (threads
//! exchanging tensors on the CPU), and every rank's bytes read from its own device beside the
//! ledger of `estimate --tp N`: weights, NCCL's buffers, the KV cache, generation's peak. Then the
//! whole model on one device: decode beside the group's, and the group's greedy tokens beside its.

pub mod pipeline;
pub mod predicted;
pub mod ranks;
pub mod tables;

use crate::error::{LabError, Result};
use crate::hw::{self, Card};
use crate::limits;
use crate::memory::mib;
use crate::model::parallel::group::on_each;
use crate::model::parallel::Group;
use crate::model::{self, generate, DecoderConfig, GenerateConfig, Precision};
use crate::session::{one_pool, Session};
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use predicted::{ceiling, predicted, rank_row, read_per_token};
use rand::{Rng, SeedableRng};
use ranks::{run_rank, RankPlan, RankRun, Request};
use serde::{Deserialize, Serialize};
use tables::{table, GpuRow, TABLE};

pub struct Parallel;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct ParallelConfig {
    /// GPUs to split the model over (tensor-parallel ranks; on the CPU, threads)
    #[arg(long, default_value_t = ParallelConfig::default().gpus, value_parser = limits::count(64))]
    pub gpus: usize,
    #[arg(long, value_enum, default_value_t = ParallelConfig::default().precision)]
    pub precision: Precision,
    /// Prompt tokens
    #[arg(long, default_value_t = ParallelConfig::default().prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt: usize,
    /// Tokens decoded
    #[arg(long, default_value_t = ParallelConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// Skip the whole model on one device (a model one GPU cannot hold)
    #[arg(long, default_value_t = false)]
    pub no_single: bool,
    /// How the model is split: tensor (every layer's heads and columns over the GPUs, NCCL) and
    /// pipeline (whole layers per GPU)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = ParallelConfig::default().layouts)]
    #[serde(default = "all_layouts")]
    pub layouts: Vec<Layout>,
    /// The pipeline's layers per GPU as llama.cpp's --tensor-split shares them (e.g. 3,2); set,
    /// or with a quantized precision (even shares), the pipeline is placed as llama.cpp places it:
    /// the token embedding in host memory, the output layer on the last slot's GPU
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub split: Vec<f64>,
    /// The card each GPU emulates (names or sizes: rtx4090,16GiB), one per GPU (it sets --gpus):
    /// each rank or stage holds a ballast so that its GPU has the card's memory. Without --split
    /// the pipeline shares the layers by the cards' memory, as llama.cpp and `plan --cards` do
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub cards: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Tensor,
    Pipeline,
}

fn all_layouts() -> Vec<Layout> {
    vec![Layout::Tensor, Layout::Pipeline]
}

impl Default for ParallelConfig {
    fn default() -> Self {
        Self {
            gpus: 2,
            precision: Precision::Bf16,
            prompt: 160,
            new_tokens: 64,
            no_single: false,
            layouts: all_layouts(),
            split: Vec::new(),
            cards: Vec::new(),
        }
    }
}

impl Stage for Parallel {
    const NAME: &'static str = "parallel";
    const TITLE: &'static str = "Several GPUs — tensor parallelism / 多 GPU 张量并行";
    const ABOUT: &'static str =
        "The model split over N GPUs (tensor parallel, NCCL): every GPU's bytes measured beside the ledger, decode and greedy tokens beside one GPU";
    const INTRO: &'static str = "相关文章讲到单卡放不下时的多卡方案。这里把模型按 Megatron 方式切到 N 张卡上(每张卡持有自己的注意力头和 MLP 列,每层两次 all-reduce,NCCL 负责通信),逐卡测量权重、NCCL 缓冲、KV cache 和生成时的峰值,与估算器的逐卡账本并列;再与单卡运行比较解码速度和贪心输出。<br>The related articles turn to several cards when one cannot hold the model. Here the model is split over N GPUs the way Megatron splits it (each GPU holds its attention heads and MLP columns; two all-reduces a layer, over NCCL), and every GPU's weights, NCCL buffers, KV cache and generation peak are read from that GPU beside the estimator's per-GPU ledger (`estimate --tp N`); then decode speed and the greedy tokens beside the whole model on one GPU. On the CPU the ranks are threads exchanging tensors.";
    type Config = ParallelConfig;
    const REPEATABLE: &'static [&'static str] = &["split", "cards"];

    fn cpu_config() -> ParallelConfig {
        ParallelConfig { prompt: 16, new_tokens: 12, ..Default::default() }
    }

    fn run(s: &mut Session, c: &ParallelConfig) -> Result<StageOutput> {
        one_pool(s.manifest().allocator, "parallel")?;
        let opened = model::source::open(&s.source, &s.opts)?;
        let cfg = opened.cfg.clone();
        drop(opened);
        let mut c = c.clone();
        if !c.cards.is_empty() {
            c.gpus = c.cards.len();
        }
        if s.device.is_cuda() && hw::cuda_device_count() < c.gpus {
            let n = hw::cuda_device_count().max(1);
            s.say(format!("{} GPUs asked, {n} here: the group is {n}", c.gpus));
            c.gpus = n;
        }
        let c = &c;
        if c.layouts.contains(&Layout::Tensor) {
            crate::model::parallel::shard::check(&cfg, c.gpus)?;
        }
        if c.precision.dense_dtype().is_none() && c.layouts.contains(&Layout::Tensor) {
            return Err(LabError::input(format!(
                "tensor parallelism splits dense weights (bf16, f16, f32), not {}; a quantized model splits by layers (--layouts pipeline)",
                c.precision
            )));
        }
        if !c.split.is_empty() && c.split.len() != c.gpus {
            return Err(LabError::input(format!("--split gives {} shares for {} GPUs", c.split.len(), c.gpus)));
        }
        let cards = c.cards.iter().map(|n| Card::parse(n)).collect::<Result<Vec<_>>>()?;
        if !cards.is_empty() && cards.len() != c.gpus {
            return Err(LabError::input(format!("--cards names {} cards for {} GPUs here", cards.len(), c.gpus)));
        }
        // Each rank reads its own device; a card emulated on the first would skew the group.
        s.whole_device(true, "the card emulation is lifted in this stage: every rank uses its whole device", |s| {
            measure(s, &cfg, c, &cards)
        })
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}

/// Greedy tokens equal to `reference`'s, counted from the first.
fn same_tokens(reference: &[u32], tokens: &[u32]) -> usize {
    reference.iter().zip(tokens).take_while(|(a, b)| a == b).count()
}

/// The layouts, then the whole model on one device, into the stage's table and findings. The
/// group runs first, so each GPU meets NCCL as a fresh process does (the one-device run before it
/// left the first GPU's driver state changed: 88 MiB less was read there on 2026-11-25).
fn measure(s: &mut Session, cfg: &DecoderConfig, c: &ParallelConfig, cards: &[Card]) -> Result<StageOutput> {
    let devs = crate::model::parallel::group::devices(&s.device, c.gpus)?;
    let cuda = s.device.is_cuda();
    let bw = s.bandwidths()?;
    let act = c.precision.act_dtype().size_in_bytes() as u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(s.opts.seed);
    let prompt: Vec<u32> = (0..c.prompt).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let gen = GenerateConfig { max_new_tokens: c.new_tokens, ..Default::default() };
    // Each layout's rows and its greedy tokens, beside the one-device loop's once that has run.
    let mut layouts: Vec<(Vec<GpuRow>, Vec<u32>)> = Vec::new();

    if c.layouts.contains(&Layout::Tensor) {
        s.console.step(format!("tensor-parallel over {} {}", c.gpus, if cuda { "GPUs" } else { "CPU threads" }));
        let mut p = predicted(cfg, c.precision, c.prompt, c.new_tokens, c.gpus)?;
        if !cuda {
            p.nccl_predicted = 0; // threads exchange tensors in the heap: no NCCL
        }
        let req = Request {
            cfg,
            precision: c.precision,
            source: &s.source,
            opts: &s.opts,
            prompt: &prompt,
            gen: gen.clone(),
        };
        let plan = RankPlan { req, group: Group::new(c.gpus, cuda)?, cards: cards.to_vec() };
        let results: Vec<Result<RankRun>> = on_each(devs.clone(), |rank, dev| run_rank(&plan, rank, dev));
        let mut rows = Vec::new();
        let mut tokens = Vec::new();
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok(r) => {
                    if rank == 0 {
                        s.say(format!("the sums: {}", r.route));
                    }
                    let ceil = ceiling(read_per_token(cfg, r.weights, r.kv_cache, act), bw.device);
                    rows.push(rank_row(&r, &p, c.gpus, ceil));
                    tokens = r.tokens;
                }
                Err(e) => rows.push(GpuRow {
                    layout: format!("tensor-parallel × {}", c.gpus),
                    rank,
                    outcome: Outcome::from_error(&e).as_str(),
                    ..p.clone()
                }),
            }
        }
        for r in &rows {
            s.say(format!(
                "rank {}: weights {} MiB (ledger {:.1}), NCCL {} MiB, {} tok/s{}, {}",
                r.rank,
                r.weights.map(|b| format!("{:.1}", mib(b))).unwrap_or_else(|| "—".into()),
                mib(r.weights_predicted),
                r.nccl.map(|b| format!("{:.1}", mib(b))).unwrap_or_else(|| "—".into()),
                r.decode_tok_s.map(|t| format!("{t:.1}")).unwrap_or_else(|| "—".into()),
                r.decode_tok_s_without_sums.map(|t| format!(" ({t:.1} with its sums skipped)")).unwrap_or_default(),
                r.outcome
            ));
        }
        layouts.push((rows, tokens));
    }

    if c.layouts.contains(&Layout::Pipeline) {
        s.console.step(format!("a pipeline over {} {}", c.gpus, if cuda { "GPUs" } else { "CPU stages" }));
        let req = Request {
            cfg,
            precision: c.precision,
            source: &s.source,
            opts: &s.opts,
            prompt: &prompt,
            gen: gen.clone(),
        };
        // llama.cpp's placement for a quantized model or on cards (the shares given, else by the
        // cards' memory, else even), or a dense model's split given.
        let runtime = crate::estimate::fit::Runtime::assumed().bytes();
        let shares = match (c.split.is_empty(), cards.is_empty(), c.precision.is_quantized()) {
            (false, _, _) => Some(c.split.clone()),
            (true, false, _) => Some(crate::estimate::parallel::shares_by_memory(cards, runtime)),
            (true, true, true) => Some(vec![1.0; c.gpus]),
            (true, true, false) => None,
        };
        let (mut stages, tokens, oom) = pipeline::run(&req, devs.clone(), shares.as_deref(), cards)?;
        if let Some(oom) = oom {
            s.say(format!("the pipeline: {oom}"));
        }
        for r in &mut stages {
            if let Some(w) = r.weights {
                r.ceiling_tok_s = ceiling(read_per_token(cfg, w, r.kv_cache.unwrap_or(0), act), bw.device);
            }
            s.say(format!(
                "pipeline stage {}: weights {} MiB (ledger {:.1}), {}",
                r.rank,
                r.weights.map(|b| format!("{:.1}", mib(b))).unwrap_or_else(|| "—".into()),
                mib(r.weights_predicted),
                r.outcome
            ));
        }
        layouts.push((stages, tokens));
    }

    let (mut rows, reference) =
        if c.no_single { (Vec::new(), None) } else { one_device(s, cfg, c, &prompt, &gen, act, bw.device)? };
    // The pipeline's rows first, then the tensor-parallel ranks', each beside the one-device loop.
    for (mut layout_rows, tokens) in layouts.into_iter().rev() {
        for r in &mut layout_rows {
            if r.outcome == Outcome::OK {
                r.tokens_equal = reference.as_deref().map(|one| same_tokens(one, &tokens));
            }
        }
        rows.extend(layout_rows);
    }
    let mut out = StageOutput { findings: findings(&rows, c.gpus), ..Default::default() };
    out.table(TABLE, table(&rows)?);
    Ok(out)
}

/// The whole model on the first device, through the lab's fused step and through the ranks' loop:
/// their rows and the loop's greedy tokens (the same arithmetic as a rank's, in one place).
fn one_device(
    s: &mut Session,
    cfg: &DecoderConfig,
    c: &ParallelConfig,
    prompt: &[u32],
    gen: &GenerateConfig,
    act: u64,
    read_gbs: f64,
) -> Result<(Vec<GpuRow>, Option<Vec<u32>>)> {
    s.console.step("the whole model on one device");
    let cuda = s.device.is_cuda();
    let mut row = GpuRow {
        layout: "one device".into(),
        device: hw::describe(&s.device),
        ..predicted(cfg, c.precision, c.prompt, c.new_tokens, 1)?
    };
    let before = s.probe.settled("before")?;
    let run = s.load(c.precision).and_then(|lm| {
        let loaded = s.probe.settled("loaded")?;
        // Untimed first, as the ranks do (`ranks::run_rank`): no kernel compiled in the timing.
        if cuda {
            crate::model::generate::warmup(&lm.model, prompt)?;
        }
        s.probe.reset_peak();
        let g = generate(&lm.model, prompt, gen)?;
        let done = s.probe.settled("generated")?;
        let bytes = lm.model.weight_bytes();
        // The same model as a group of one: the loop a rank decodes with (candle's ops, a sum
        // per half-layer that is the identity), so the group's speed has a like beside it.
        let one = crate::model::parallel::ThreadComm::group(1).remove(0);
        let looped = generate(&lm.model.into_rank(std::sync::Arc::new(one))?, prompt, gen)?;
        Ok((bytes, loaded, done, g, looped))
    });
    let (tensor_bytes, loaded, done, g, looped) = match run {
        Ok(x) => x,
        Err(e @ LabError::Oom(_)) => {
            s.say(format!("one device: {e}"));
            return Ok((vec![GpuRow { outcome: Outcome::from_error(&e).as_str(), ..row }], None));
        }
        Err(e) => return Err(e),
    };
    let weights = if cuda { loaded.allocated.saturating_sub(before.allocated) } else { tensor_bytes };
    row.weights = Some(weights);
    row.kv_cache = Some(g.kv_cache_bytes);
    row.peak_above_weights = cuda.then(|| done.peak.saturating_sub(loaded.allocated));
    row.prefill_tok_s = Some(g.prefill_tok_s());
    row.decode_tok_s = Some(g.decode_tok_s());
    row.ceiling_tok_s = ceiling(read_per_token(cfg, weights, g.kv_cache_bytes, act), read_gbs);
    row.tokens = g.generated_ids.len();
    row.outcome = Outcome::OK.into();
    s.say(format!(
        "one device: {:.1} tok/s decode (the ranks' loop: {:.1}), weights {:.1} MiB",
        g.decode_tok_s(),
        looped.decode_tok_s(),
        mib(weights)
    ));
    // The loop row counts against the fused step; the layouts count against the loop.
    let loop_row = GpuRow {
        layout: "one device, the ranks' loop".into(),
        prefill_tok_s: Some(looped.prefill_tok_s()),
        decode_tok_s: Some(looped.decode_tok_s()),
        tokens_equal: Some(same_tokens(&g.generated_ids, &looped.generated_ids)),
        tokens: looped.generated_ids.len(),
        ..row.clone()
    };
    Ok((vec![row, loop_row], Some(looped.generated_ids)))
}

fn findings(rows: &[GpuRow], gpus: usize) -> Vec<Finding> {
    let mut out = Vec::new();
    let rank0 =
        rows.iter().find(|r| r.layout.starts_with("tensor-parallel") && r.rank == 0 && r.outcome == Outcome::OK);
    let single = rows.iter().find(|r| r.layout == "one device" && r.outcome == Outcome::OK);
    let looped = rows.iter().find(|r| r.layout.ends_with("the ranks' loop")).and_then(|r| r.decode_tok_s);
    if let Some(r) = rank0 {
        out.push(
            Finding::new(format!("rank 0 of {gpus}: weights"), "MiB", r.weights.map(mib))
                .predicted(mib(r.weights_predicted)),
        );
        if let Some(n) = r.nccl {
            out.push(Finding::new(format!("rank 0 of {gpus}: NCCL's device memory"), "MiB", Some(mib(n))).predicted(mib(r.nccl_predicted)).note("the device's used bytes outside candle's pool once the rank joined and summed once (every connection made at the join: NCCL_RUNTIME_CONNECT=0)"));
        }
        let note = match (single, r.tokens_equal) {
            (Some(s), Some(eq)) => format!(
                "one device: {:.1} tok/s (the ranks' loop on it: {}); greedy tokens equal to its for the first {eq} of {}",
                s.decode_tok_s.unwrap_or_default(),
                looped.map(|t| format!("{t:.1} tok/s")).unwrap_or_else(|| "—".into()),
                r.tokens
            ),
            _ => String::new(),
        };
        out.push(
            Finding::new(format!("decode over {gpus} ranks"), "tok/s", r.decode_tok_s)
                .ceiling(r.ceiling_tok_s)
                .note(note),
        );
    }
    if let Some(p) = rows.iter().find(|r| r.layout.starts_with("pipeline") && r.outcome == Outcome::OK) {
        let eq = p
            .tokens_equal
            .map(|n| format!("greedy tokens equal to one device's for the first {n} of {}", p.tokens))
            .unwrap_or_default();
        out.push(
            Finding::new(format!("decode, a pipeline over {gpus}"), "tok/s", p.decode_tok_s)
                .note(format!("one thread runs the stages in turn; {eq}")),
        );
    }
    out
}
