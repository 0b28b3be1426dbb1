//! The estimator against every GPU measurement of stages 1–2 committed under data/results, and
//! the transient formula against the CPU's counting allocator.

mod common;

use std::path::Path;
use vram_lab::estimate::transient::{phases, Prefill};
use vram_lab::experiments::check::{limits, steps, weights};
use vram_lab::model::{AttentionMode, DecoderConfig, Logits, Precision};

fn results() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/results"))
}

/// The transient (peak less what stays allocated) of every committed prefill and batch step,
/// BF16 and Q4, each attention and logits kind, equals the formula to 0.1 % of the step's peak.
#[test]
fn transient_of_every_committed_step() {
    let st = steps(results()).unwrap();
    assert!(st.len() >= 150, "only {} steps found", st.len());
    for s in &st {
        let measured = s.peak_mib - s.allocated_mib;
        assert!(
            (measured - s.predicted_transient_mib).abs() <= 0.001 * s.peak_mib,
            "{} {} {} {} × {}: measured {measured:.2} MiB, formula {:.2}",
            s.file,
            s.precision,
            s.attention,
            s.batch,
            s.seq,
            s.predicted_transient_mib
        );
    }
    // The three moments that can be the peak all occur among them.
    for at in ["attention", "mlp", "logits"] {
        assert!(st.iter().any(|s| s.peak_at == at), "no committed step peaks at {at}");
    }
}

/// What stays allocated and the peak within 3 %, BF16 and the Q4 plans: Q4's process carries candle's
/// quantized-matmul buffer for its longest prefill so far, replayed from the sweeps' order.
#[test]
fn allocated_and_peak_within_3_percent() {
    let st = steps(results()).unwrap();
    for p in [Precision::Bf16, Precision::Q4] {
        assert!(st.iter().filter(|s| s.precision == p).count() >= 80, "{p}");
    }
    // llama.cpp's Q4_K_M mix in BF16 (its products cast to F32 and back) and in F32: H100, 2026-11-24.
    for (p, n) in [(Precision::Q4KM, 25), (Precision::Q4KMF32, 8)] {
        assert!(st.iter().filter(|s| s.precision == p).count() >= n, "{p}");
    }
    for s in &st {
        assert!(
            s.allocated_err_pct().abs() <= 3.0 && s.peak_err_pct().abs() <= 3.0,
            "{} {} {} {} × {}: allocated {:+.2} %, peak {:+.2} %",
            s.file,
            s.precision,
            s.logits.name(),
            s.batch,
            s.seq,
            s.allocated_err_pct(),
            s.peak_err_pct()
        );
    }
    let w = weights(results()).unwrap();
    assert!(w.len() >= 4);
    for (file, p, measured, predicted) in w {
        assert!(
            ((predicted - measured) / measured).abs() <= 0.001,
            "{file} {p}: loaded {measured} MiB, formula {predicted}"
        );
    }
}

/// The longest context: the ledger's search, with the pool's slack (`memory::policy::POOL_SLACK`),
/// within 2 % of every bisection that retries a failed request after trimming the pool
/// (kv_limit's oom_retry) — or within one bisection step where that step is more than 2 % of the
/// context (the A4000's BF16 edge at 3,584 tokens: a step is 7 %, 64 MiB, less than the pool's
/// slack varies from layer to layer). The edges of all kinds are among them: logits, attention
/// and MLP, two cards and two models. Runs before the retry stopped where the pool's mapped
/// memory, not the live bytes, hit the card (16,128 tokens where the ledger says 24,320): the
/// ledger stays an upper bound on them.
#[test]
fn longest_context_within_2_percent() {
    let l = limits(results()).unwrap();
    assert!(l.len() >= 10);
    for x in l.iter().filter(|x| !x.retried) {
        assert!(
            x.predicted_max_context >= x.max_context,
            "{} {} {} {}: measured {}, ledger {}",
            x.file,
            x.precision,
            x.logits.name(),
            x.attention,
            x.max_context,
            x.predicted_max_context
        );
    }
    let retried: Vec<_> = l.iter().filter(|x| x.retried).collect();
    assert!(retried.len() >= 18, "only {} runs with the retry", retried.len());
    for (logits, attention) in [(Logits::All, "bounded"), (Logits::Last, "bounded"), (Logits::All, "naive")] {
        assert!(retried.iter().any(|x| x.logits == logits && x.attention == attention), "{logits:?} {attention}");
    }
    assert!(retried.iter().any(|x| x.card == "a4000") && retried.iter().any(|x| x.file.contains("/3b/")));
    // Issue 42's families (Qwen3-8B, Llama-3.1-8B, Llama-2-7B, Mistral-7B) and Qwen3-30B-A3B: every
    // peak equals the ledger, but the pool's slack at the edge was modelled on Qwen2.5's worst
    // layer. In `2026-11-27-families` Llama-2-7B's synthetic weights were drawn through F32
    // staging on the GPU that left 875 MiB of partly used chunks (the ledger 7.3 % long); drawn on
    // the host since (`2026-11-27-mixtures/RUN.md`), every search is short of the bisection by one
    // to four steps of 256 tokens: the ledger never promises more than the card gives.
    let (fam, retried): (Vec<_>, Vec<_>) = retried.into_iter().partition(|x| x.file.contains("2026-11-27-families/"));
    assert_eq!(fam.len(), 4, "the four families' BF16 limits");
    for x in &fam {
        assert!(x.err_pct().abs() <= 7.5, "{}: measured {}, ledger {}", x.file, x.max_context, x.predicted_max_context);
    }
    // The same four edges, traced (`2026-11-28-family-edges`): `family_edges_keep_less_than_the_ledger_assumes`.
    let (mix, retried): (Vec<_>, Vec<_>) = retried
        .into_iter()
        .partition(|x| x.file.contains("2026-11-27-mixtures/") || x.file.contains("2026-11-28-family-edges/"));
    assert_eq!(mix.len(), 9, "the four families and Qwen3-30B-A3B, and the four families traced");
    for x in &mix {
        let steps_short = (x.max_context as f64 - x.predicted_max_context as f64) / x.resolution as f64;
        assert!(
            (0.0..=4.0).contains(&steps_short),
            "{}: measured {}, ledger {}",
            x.file,
            x.max_context,
            x.predicted_max_context
        );
    }
    // The five families under each allocator in one call (`2026-11-28-pages`), and Q4_K_M under the
    // pages (`-q4`): with the lab's page allocator the search is within one step, never long:
    // `pages_put_the_ledger_within_one_step`.
    let (pages, retried): (Vec<_>, Vec<_>) = retried.into_iter().partition(|x| x.file.contains("2026-11-28-pages"));
    assert_eq!(pages.len(), 14, "five families, two allocators; four in Q4_K_M");
    for x in &retried {
        let step = 100.0 * x.resolution as f64 / x.max_context as f64;
        assert!(
            x.err_pct().abs() <= 2.0f64.max(step),
            "{} {} {} {}: measured {}, ledger {} ({:+.2} %)",
            x.file,
            x.precision,
            x.logits.name(),
            x.attention,
            x.max_context,
            x.predicted_max_context,
            x.err_pct()
        );
    }
}

/// The pool maps whole 32 MiB chunks: after every trim in the committed allocation traces its
/// reserved bytes are exactly the chunks that live allocations touch (counted by the hook), and
/// the slack the ledger assumes per chunk of live allocations is the traces' worst trim divided
/// by the chunks the ledger counts at that prefill's busiest moment (`Phases::chunked`).
#[test]
fn pool_keeps_the_chunks_live_allocations_touch() {
    use vram_lab::memory::policy::POOL_SLACK;
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let dir = results().join("h200/2026-11-23-pool");
    let (mut worst, mut trims) = (0f64, 0);
    for name in ["pool-bf16-last", "pool-bf16-all", "pool-q4-last"] {
        let text = std::fs::read_to_string(dir.join(name).join("trims.csv")).unwrap();
        let (w, n) = worst_slack_per_chunk(&cfg, &text, name);
        worst = worst.max(w);
        trims += n;
    }
    assert!(trims >= 100, "only {trims} trims");
    assert!(
        (worst - POOL_SLACK as f64).abs() < 1024.0,
        "worst slack per chunk of allocations {worst:.0} B, POOL_SLACK {POOL_SLACK}"
    );
}

/// Issue 42's four families at their longest BF16 context, traced (`h200/2026-11-28-family-edges`,
/// RUN.md there): every trim leaves the pool the chunks live allocations touch, keeping less than
/// the ledger's slack (`POOL_SLACK` per chunk of the busiest moment's allocations), so the ledger's
/// search, run by the lab's check code on these folders, never promises more than the bisection.
/// It is short by up to four steps of 256 tokens: Qwen3-8B, Llama-3.1-8B and Mistral-7B fail one
/// step past their edge at their first or second retry, keeping 104-167 MiB (7-11 runs of adjacent
/// allocations), where a prefill that retries layer after layer leaves more runs at each trim, up
/// to the ledger's 370-383 MiB (Llama-2-7B here, Qwen2.5-7B in `2026-11-23-pool`); which one a
/// prefill meets depends on where the pool placed earlier tensors, not on the live set's shapes.
#[test]
fn family_edges_keep_less_than_the_ledger_assumes() {
    use vram_lab::memory::policy::POOL_SLACK;
    let dir = results().join("h200/2026-11-28-family-edges");
    for family in ["qwen3-8b", "llama-3.1-8b", "mistral-7b", "llama-2-7b"] {
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(family).join("manifest.json")).unwrap()).unwrap();
        let cfg = DecoderConfig::preset(manifest["model"].as_str().unwrap().trim_start_matches("synthetic:")).unwrap();
        let text = std::fs::read_to_string(dir.join(family).join("trims.csv")).unwrap();
        let (worst, trims) = worst_slack_per_chunk(&cfg, &text, family);
        assert!(trims >= 1, "{family}: no trim");
        assert!(worst <= POOL_SLACK as f64, "{family}: {worst:.0} B kept per chunk, POOL_SLACK {POOL_SLACK}");
    }
    let l = limits(&dir).unwrap();
    assert_eq!(l.len(), 4, "the four families' BF16 limits");
    for x in &l {
        let short = x.max_context as i64 - x.predicted_max_context as i64;
        assert!(
            x.retried && (0..=4 * x.resolution as i64).contains(&short),
            "{}: measured {}, ledger {}",
            x.file,
            x.max_context,
            x.predicted_max_context
        );
    }
    // Llama-2-7B's edge retried in 13 layers: its slack grew to the ledger's, one step apart.
    let x = l.iter().find(|x| x.file.starts_with("llama-2-7b/")).unwrap();
    assert!(x.max_context - x.predicted_max_context <= x.resolution, "{}: {}", x.max_context, x.predicted_max_context);
}

/// The most a trace's trims keep beyond the live bytes per chunk the ledger counts at the
/// prefill each follows (`chunks_at`), and how many trims there are.
fn worst_slack_per_chunk(cfg: &DecoderConfig, trace: &str, name: &str) -> (f64, usize) {
    let (mut chunks, mut trims, mut worst) = (0.0, 0, 0f64);
    for line in trace.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if let Some(c) = chunks_at(cfg, f[0]) {
            chunks = c;
        } else if let Some(slack) = trim_slack(&f, &format!("{name}: {line}")) {
            worst = worst.max(slack as f64 / chunks);
            trims += 1;
        }
    }
    (worst, trims)
}

/// The chunks (each allocation counted up to one, in chunks) the ledger counts at the busiest
/// moment of the prefill a trace's mark names ("mark prefill bf16 1 x 33792 last logits bounded
/// attention"); None for any other line. Q4 keeps candle's quantized-matmul buffers beside them,
/// this prefill's size. The retry happens where the pool runs out: at the busiest moment (a trim at
/// an earlier moment, with fewer allocations, is divided by more chunks than it had: its share is
/// understated, never the worst).
fn chunks_at(cfg: &DecoderConfig, event: &str) -> Option<f64> {
    use clap::ValueEnum;
    use vram_lab::memory::policy::POOL_CHUNK;
    let w: Vec<&str> = event.strip_prefix("mark prefill ")?.split(' ').collect();
    let precision = Precision::from_str(w[0], true).unwrap();
    let (batch, seq): (usize, usize) = (w[1].parse().unwrap(), w[3].parse().unwrap());
    let logits = Logits::from_str(w[4], true).unwrap();
    assert_eq!(w[6], "bounded");
    let p = phases(
        cfg,
        &Prefill {
            seq,
            batch,
            act_bytes: precision.act_dtype().size_in_bytes(),
            logits,
            attention: AttentionMode::default(),
            cast: precision.casts_products(),
        },
    );
    let c = p.chunked;
    let kept = vram_lab::estimate::transient::chunk_share(vram_lab::estimate::workspace::held_parts(
        cfg,
        precision,
        (seq * batch) as u64,
    ));
    let at = match p.peak_at() {
        "mlp" => c.mlp,
        "logits" => c.logits,
        "attention" => c.attention,
        _ => c.o_proj,
    };
    Some((kept + at) as f64 / POOL_CHUNK as f64)
}

/// A `trimmed` line of a trace (event, ptr, bytes, reserved, used, touched, runs): the pool's
/// reserved bytes are whole chunks, exactly those the live allocations touch; returns what it
/// keeps beyond the live bytes. None for any other line.
fn trim_slack(f: &[&str], what: &str) -> Option<u64> {
    use vram_lab::memory::policy::POOL_CHUNK;
    if f[0] != "trimmed" {
        return None;
    }
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    let (reserved, used, touched) = (n(3), n(4), n(5));
    assert_eq!(reserved % POOL_CHUNK, 0, "{what}");
    assert_eq!(reserved, touched, "{what}");
    Some(reserved - used)
}

/// On CPU the counting allocator sees the same live set in the MLP: `vram-lab kv` on 0.5B's
/// shapes at lengths where the MLP is the busiest moment gives the formula's transient, dense in
/// F32 and Q4_K_M in BF16 (each quantized product holding its F32 input and output beside the
/// result while it casts back, as candle's CUDA MMQ path does). Q4_K_M at shorter lengths: 0.5B's
/// 896 columns are no whole number of k-quant blocks, so llama.cpp's mix gives its products Q5_0,
/// whose CPU product in candle has no SIMD path (128 and 256 tokens took 6 minutes of the tests).
#[test]
fn transient_on_cpu_equals_the_formula() {
    use vram_lab::model::Precision;
    for (precision, lengths) in [(Precision::F32, "128,256"), (Precision::Q4KM, "16,32")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("kv");
        let o = common::lab_quiet(&[
            "kv",
            "--device",
            "cpu",
            "--model",
            "synthetic:qwen2.5-0.5b",
            "--precisions",
            precision.name(),
            "--sweeps",
            "prefill",
            "--logits",
            "last",
            "--lengths",
            lengths,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::output_text(&o));
        let df = common::read_csv(&out.join("kv/kv_prefill.csv"));
        let cfg = vram_lab::model::DecoderConfig::preset("qwen2.5-0.5b").unwrap();
        let seqs = df.column("seq").unwrap().cast(&polars::prelude::DataType::Int64).unwrap();
        let tr = df.column("transient_mib").unwrap().cast(&polars::prelude::DataType::Float64).unwrap();
        assert_eq!(seqs.len(), 2);
        for (seq, measured) in seqs.i64().unwrap().iter().zip(tr.f64().unwrap().iter()) {
            let (seq, measured) = (seq.unwrap() as usize, measured.unwrap());
            let p = phases(
                &cfg,
                &Prefill {
                    seq,
                    batch: 1,
                    act_bytes: precision.act_dtype().size_in_bytes(),
                    logits: Logits::Last,
                    attention: AttentionMode::default(),
                    cast: precision.casts_products(),
                },
            );
            assert_eq!(p.peak_at(), "mlp");
            let predicted = p.transient() as f64 / (1 << 20) as f64;
            assert!(
                (measured - predicted).abs() < 0.01,
                "{precision} {seq} tokens: measured {measured:.3} MiB, formula {predicted:.3}"
            );
        }
    }
}

/// Every committed training step (`vram-lab train` on a GPU): the formula, recomputed here from
/// the run's model and shape, within 10 % of the measured step peak with and without
/// checkpointing, and the gradients to the byte (0.01 MiB).
#[test]
fn training_steps_within_10_percent() {
    use vram_lab::estimate::training::{
        ledger, step_activations_updating, TrainSetup, TrainShape, CANDLE_NN_ADAMW_COPIES,
    };
    use vram_lab::model::train::optim::UPDATE_COPIES;
    use vram_lab::model::DecoderConfig;
    let mut checked = 0;
    let runs =
        ["h200", "h100"].iter().filter_map(|gpu| std::fs::read_dir(results().join(gpu)).ok()).flatten().flatten();
    for run in runs {
        // Runs before 2026-11-24 updated with candle_nn's AdamW, later ones with the lab's in place.
        let copies = if run.file_name().to_string_lossy().as_ref() < "2026-11-24" {
            CANDLE_NN_ADAMW_COPIES
        } else {
            UPDATE_COPIES
        };
        for dir in std::fs::read_dir(run.path()).unwrap().flatten() {
            let csv = dir.path().join("train/train_memory.csv");
            if !csv.is_file() {
                continue;
            }
            let manifest: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.path().join("manifest.json")).unwrap()).unwrap();
            let preset = manifest["model"].as_str().unwrap().trim_start_matches("synthetic:");
            let cfg = DecoderConfig::preset(preset).unwrap();
            let c = &manifest["stages"][0]["config"];
            let sh =
                TrainShape { batch: c["batch"].as_u64().unwrap() as usize, seq: c["seq"].as_u64().unwrap() as usize };
            let p = cfg.param_count() as u64;
            let df = common::read_csv(&csv);
            let ckpt = df.column("checkpointing").unwrap().bool().unwrap().clone();
            let item = df.column("item").unwrap().str().unwrap().clone();
            let measured = df.column("measured_mib").unwrap().f64().unwrap().clone();
            for i in 0..df.height() {
                let (Some(ck), Some(what), Some(m)) = (ckpt.get(i), item.get(i), measured.get(i)) else { continue };
                let a = step_activations_updating(&cfg, p, sh, ck, copies);
                let l = ledger(p, &TrainSetup::fp32_adam());
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                match what {
                    "step peak" => {
                        let want = mib(l.weights + l.optimizer + a.peak.max(a.optimizer_peak));
                        let err = (want - m).abs() / m;
                        // The in-place update's runs agree to 0.1 %; the earlier ones to 10 %.
                        let bound = if copies == UPDATE_COPIES { 0.005 } else { 0.10 };
                        assert!(
                            err <= bound,
                            "{}: {preset} {sh:?} checkpointing {ck}: {m:.1} MiB measured, {want:.1} by the formula",
                            dir.path().display()
                        );
                        checked += 1;
                    }
                    "gradients" => {
                        assert!((mib(a.gradients) - m).abs() < 0.01, "{}: gradients {m} MiB", dir.path().display())
                    }
                    _ => {}
                }
            }
        }
    }
    // Four H200 runs with candle_nn's AdamW and three H100 runs with the lab's, each with and
    // without checkpointing.
    assert!(checked >= 14, "only {checked} training steps found");
}

/// llama.cpp's own GPU buffers (model, KV cache, compute) in every committed launch equal
/// `estimate --engine llama.cpp` for the same model and flags, to a quarter MiB: the committed
/// H200 grids (`data/results/h200/2026-11-27-llamacpp-memory`, 116 launches: Qwen2.5 0.5B-14B and
/// Qwen3-8B, Q4_K_M to BF16, 4k-64k cells, flash attention on and off, F16/Q8_0/Q4_0 caches,
/// micro-batches 128-4096, full and partial offload) and the H100 grid of mixtures and Mistral
/// v0.1 (`h100/2026-12-06-llamacpp-moe`, 41 launches: experts on the host by `--n-cpu-moe`,
/// `--cpu-moe`-like and other `-ot` patterns) and of Gemma 3 (`h100/2026-12-06-llamacpp-gemma`, 26
/// launches: the windowed cache, `--swa-full`) and gpt-oss-20b (`h100/2026-12-06-llamacpp-gpt-oss`, 22
/// launches: MXFP4 experts, sinks, windows every other layer). Every buffer within a quarter MiB, quantized caches
/// (whose rows llama.cpp rotates by a Hadamard matrix) included.
#[test]
fn llamacpp_buffers_of_every_committed_launch() {
    use vram_lab::experiments::check::llamacpp::launches;
    let l = launches(results()).unwrap();
    assert!(l.len() >= 150, "only {} llama.cpp launches found", l.len());
    for x in &l {
        let predicted = [x.predicted.model, x.predicted.context, x.predicted.compute].map(|b| b as f64 / 1048576.0);
        for (what, (m, p)) in ["model", "KV", "compute"].iter().zip(x.measured.iter().zip(predicted)) {
            let gap = (m - p).abs();
            assert!(
                gap <= 0.25,
                "{} {} {}: {what} measured {m:.2} MiB, predicted {p:.2}",
                x.file,
                x.preset,
                x.launch.flags()
            );
        }
    }
    // gpt-oss-20b among them: MXFP4 experts on the GPU and the host, host layers whose
    // attention the sinks send to the GPU.
    let oss: Vec<_> = l.iter().filter(|x| x.preset == "gpt-oss-20b").collect();
    assert!(oss.len() >= 20, "{} launches of gpt-oss", oss.len());
    assert!(oss.iter().any(|x| x.launch.n_cpu_moe.is_some()) && oss.iter().any(|x| x.launch.gpu_layers.is_some()));
    // Gemma 3 among them: its windowed cache, and --swa-full.
    let gemma: Vec<_> = l.iter().filter(|x| x.preset.starts_with("gemma-3")).collect();
    assert!(gemma.len() >= 20 && gemma.iter().any(|x| x.launch.swa_full), "{} launches of Gemma 3", gemma.len());
    // The mixtures are among them, with experts on the host and on the GPU.
    let moe = l.iter().filter(|x| x.preset == "qwen3-30b-a3b" || x.preset == "mixtral-8x7b").count();
    assert!(moe >= 30, "{moe} launches of mixtures");
    assert!(l.iter().any(|x| x.launch.n_cpu_moe.is_some()) && l.iter().any(|x| !x.launch.host_tensors.is_empty()));
    // The whole process as nvidia-smi listed it: within max(1 %, 64 MiB) of the prediction for the
    // launch's own prompt (the context, cuBLAS and the scratch pool beside the buffers).
    for x in &l {
        let bar = (0.01 * x.smi_mib).max(64.0);
        assert!(
            x.smi_err_mib().abs() <= bar,
            "{} {}: nvidia-smi {:.0} MiB, predicted {:.0}",
            x.file,
            x.launch.flags(),
            x.smi_mib,
            x.predicted_smi_mib()
        );
    }
    // Each GPU of a launch over several (`-ts`): its buffers and nvidia-smi's figure for it.
    for x in &l {
        for (d, g) in x.devices.iter().enumerate() {
            let predicted = [g.predicted.model, g.predicted.context, g.predicted.compute].map(|b| b as f64 / 1048576.0);
            for (m, p) in g.measured.iter().zip(predicted) {
                assert!((m - p).abs() <= 0.25, "{} cuda{d}: {:?} against {predicted:?}", x.file, g.measured);
            }
            let smi = (g.predicted.total() + x.beyond.total()) as f64 / 1048576.0;
            assert!(
                (g.smi_mib - smi).abs() <= (0.01 * g.smi_mib).max(64.0),
                "{} cuda{d}: nvidia-smi {}",
                x.file,
                g.smi_mib
            );
        }
    }
    // Partial offloads are among them: the scheduler's copies are what they exercise.
    assert!(l.iter().filter(|x| x.launch.gpu_layers.is_some_and(|n| n < 20)).count() >= 8);
}

/// Issue 42's "within one step": the five families' longest BF16 context on an emulated RTX 4090,
/// bisected under candle's pool and under the lab's page allocator in one call on one H200
/// (`h200/2026-11-28-pages`, RUN.md there). The page allocator keeps mapped only the 2 MiB pages
/// live tensors touch, so its slack is bounded by the shapes (`PAGE_SLACK` per chunk of the
/// busiest moment's allocations) and the ledger's search lands within one step of every edge,
/// never past it; under the pool, whose slack follows where it placed earlier tensors, the same
/// search stays one to four steps short. The pages reach further on the same card, and each
/// prefill's peak equals the ledger's under both. Q4_K_M under the pages (`2026-11-28-pages-q4`):
/// the four families within one step too.
#[test]
fn pages_put_the_ledger_within_one_step() {
    let dir = results().join("h200/2026-11-28-pages");
    let l = limits(&dir).unwrap();
    assert_eq!(l.len(), 10, "five families, two allocators");
    let steps_short = |x: &vram_lab::experiments::check::checks::LimitCheck| {
        (x.max_context as i64 - x.predicted_max_context as i64) / x.resolution as i64
    };
    for family in ["qwen2.5-7b", "qwen3-8b", "llama-3.1-8b", "mistral-7b", "llama-2-7b"] {
        let get = |a: &str| l.iter().find(|x| x.file.starts_with(&format!("kv-{family}-bf16-{a}/"))).unwrap();
        let (pages, pool) = (get("pages"), get("pool"));
        assert!(pages.retried && pool.retried);
        assert!(
            (0..=1).contains(&steps_short(pages)),
            "{family} pages: {} vs ledger {}",
            pages.max_context,
            pages.predicted_max_context
        );
        assert!(
            (1..=4).contains(&steps_short(pool)),
            "{family} pool: {} vs ledger {}",
            pool.max_context,
            pool.predicted_max_context
        );
        assert!(
            pages.max_context > pool.max_context,
            "{family}: pages {} pool {}",
            pages.max_context,
            pool.max_context
        );
    }
    // Q4_K_M, each family's three lengths around the ledger's edge (`2026-11-28-pages-q4`).
    let q4 = results().join("h200/2026-11-28-pages-q4");
    let l = limits(&q4).unwrap();
    assert_eq!(l.len(), 4, "four families");
    for x in &l {
        assert!(x.retried && x.precision == Precision::Q4KM);
        assert!(
            (0..=1).contains(&steps_short(x)),
            "{}: {} vs ledger {}",
            x.file,
            x.max_context,
            x.predicted_max_context
        );
    }
    let st: Vec<_> = steps(&dir).unwrap().into_iter().chain(steps(&q4).unwrap()).collect();
    assert!(st.len() >= 47, "{} prefills", st.len());
    for s in &st {
        assert!(
            (s.peak_mib - s.predicted_peak_mib).abs() <= 0.001 * s.peak_mib,
            "{} {}: {} vs {}",
            s.file,
            s.seq,
            s.peak_mib,
            s.predicted_peak_mib
        );
    }
}
