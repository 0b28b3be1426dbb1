//! `estimate --engine llama.cpp` as a user runs it: llama.cpp's buffers for a preset in the
//! types asked, for a GGUF file in its own, the flags of the lab's engine refused by name, and
//! llama.cpp's own refusals.

mod common;

use vram_lab::estimate::llamacpp::{memory, CacheType, Launch};
use vram_lab::model::gguf::recipe::FileType;
use vram_lab::model::gguf::writer::{plan, FileTypes};
use vram_lab::model::DecoderConfig;

use common::{lab_quiet as lab, output_text as text};

fn rows(dir: &std::path::Path) -> Vec<Vec<String>> {
    let t = std::fs::read_to_string(dir.join("estimate/estimate_llamacpp.csv")).unwrap();
    t.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

/// The command's table holds, per type and device, what the library computes for the same flags.
#[test]
fn estimate_prints_llamacpp_buffers_per_type() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("e");
    let o = lab(&[
        "estimate",
        "--engine",
        "llama.cpp",
        "--model",
        "synthetic:qwen2.5-7b",
        "--seq",
        "20000",
        "--gguf-types",
        "q4_k_m,bf16",
        "--ctk",
        "q8_0",
        "--ctv",
        "q8_0",
        "--ngl",
        "20",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r = rows(&out);
    assert_eq!(r.len(), 4, "{r:?}");
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let l = Launch {
        ctx: 20000,
        gpu_layers: Some(20),
        cache_k: CacheType::Q8_0,
        cache_v: CacheType::Q8_0,
        ..Launch::default()
    };
    for (i, t) in [FileType::Q4KM, FileType::Bf16].into_iter().enumerate() {
        let m = memory(&cfg, &plan(&cfg, FileTypes::Llama(t)), &l).unwrap();
        let gpu = &r[2 * i];
        assert_eq!((gpu[0].as_str(), gpu[1].as_str()), (t.name(), "gpu"));
        let mib = |b: u64| b as f64 / 1048576.0;
        for (col, want) in [(2, m.gpu.model), (3, m.gpu.context), (4, m.gpu.compute)] {
            let got: f64 = gpu[col].parse().unwrap();
            assert!((got - mib(want)).abs() < 0.01, "{t:?} column {col}: {got} vs {}", mib(want));
        }
    }
    // -ngl 20 of 28 layers: 19 layers' cache on the GPU, 9 on the host, in Q8_0 (34 B per 32 values).
    let kv_layer = 2.0 * (512.0 / 32.0 * 34.0) * 20224.0 / 1048576.0;
    let (gpu_kv, host_kv): (f64, f64) = (r[0][3].parse().unwrap(), r[1][3].parse().unwrap());
    assert!((gpu_kv - 19.0 * kv_layer).abs() < 0.01 && (host_kv - 9.0 * kv_layer).abs() < 0.01, "{gpu_kv} {host_kv}");
}

/// A GGUF is priced by its own tensors: the file's types, not a recipe's.
#[test]
fn a_gguf_file_is_priced_in_its_own_types() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    let o = lab(&["quantize", "--model", "synthetic:tiny", "--type", "q8_0", "--to", gguf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = tmp.path().join("e");
    let o =
        lab(&["estimate", "--engine", "llama.cpp", "--model", gguf.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let r = rows(&out);
    assert_eq!(r.len(), 2);
    let cfg = DecoderConfig::preset("tiny").unwrap();
    let m = memory(&cfg, &plan(&cfg, FileTypes::Llama(FileType::Q8_0)), &Launch::default()).unwrap();
    let got: f64 = r[0][2].parse().unwrap();
    assert!((got - m.gpu.model as f64 / 1048576.0).abs() < 0.01, "{got}");
}

#[test]
fn flags_of_the_other_engine_are_refused_by_name() {
    for (args, needle) in [
        (vec!["estimate", "--ngl", "10"], "--ngl is a flag of --engine llama.cpp"),
        (vec!["estimate", "--ctk", "q8_0"], "--ctk is a flag of --engine llama.cpp"),
        (vec!["estimate", "--engine", "llama.cpp", "--tp", "2"], "--tp is not priced for --engine llama.cpp"),
        (vec!["estimate", "--n-cpu-moe", "4"], "--n-cpu-moe is a flag of --engine llama.cpp"),
        (vec!["estimate", "--engine", "llama.cpp", "--override-tensor", "exps=CUDA0"], "only =CPU is priced"),
        (
            vec!["estimate", "--engine", "llama.cpp", "--model", "synthetic:qwen2.5-7b", "--cpu-moe"],
            "--cpu-moe and --n-cpu-moe place a mixture's experts",
        ),
        (
            vec!["estimate", "--engine", "llama.cpp", "--fa", "off", "--ctv", "q8_0"],
            "quantized V cache without flash attention",
        ),
    ] {
        let o = lab(&args);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(needle) && !t.contains("panicked"), "{args:?}:\n{t}");
    }
}

/// Mistral v0.1's window does not shrink llama.cpp's cache (its llama graph attends to every
/// cell): priced with the whole cache, and the estimate says so.
#[test]
fn a_sliding_window_is_priced_as_llama_cpp_attends() {
    let o = lab(&["estimate", "--engine", "llama.cpp", "--model", "synthetic:mistral-7b-v0.1", "--seq", "32768"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("KV 4096.00 (32768 cells)") && t.contains("window"), "{t}");
}

/// `plan --engine llama.cpp` for a mixture that does not fit a 16 GB card whole keeps the fewest
/// layers' experts on the host: the plan's --n-cpu-moe fits the card less the margin, one layer
/// fewer does not.
#[test]
fn plan_keeps_the_fewest_experts_on_the_host() {
    use vram_lab::estimate::llamacpp::process;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("plan");
    let o = lab(&[
        "plan",
        "--engine",
        "llama.cpp",
        "--model",
        "synthetic:qwen3-30b-a3b",
        "--card",
        "a4000",
        "--seq",
        "32768",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = std::fs::read_to_string(out.join("plan").join("plan_llamacpp.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let f16: Vec<&str> = lines.map(|l| l.split(',').collect::<Vec<_>>()).find(|row| row[1] == "f16").unwrap();
    let at = |name: &str| f16[head.iter().position(|h| *h == name).unwrap()];
    let n: usize = at("n_cpu_moe").parse().unwrap();
    assert_eq!(at("seq"), "32768");
    assert!(at("command").contains(&format!("--n-cpu-moe {n}")), "{}", at("command"));
    let cfg = DecoderConfig::preset("qwen3-30b-a3b").unwrap();
    let tensors = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let need = |n| {
        let l = Launch { ctx: 32768, outputs: Some(1), n_cpu_moe: Some(n), ..Launch::default() };
        memory(&cfg, &tensors, &l).unwrap().gpu.total() + process::beyond(&cfg, &l, true, 32768).total()
    };
    let budget = vram_lab::hw::Card::parse("a4000").unwrap().total_bytes() - (256 << 20);
    assert!(n > 0 && need(n) <= budget && need(n - 1) > budget, "{n}");
}

/// `plan --engine llama.cpp`: the context chosen fits the card less the margin and the next 256
/// cells do not; flags of the other engine are refused by name.
#[test]
fn plan_picks_the_longest_context_that_fits() {
    use vram_lab::estimate::llamacpp::process;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("plan");
    let args = ["plan", "--engine", "llama.cpp", "--model", "synthetic:qwen2.5-32b", "--card", "rtx4090"];
    let o = lab(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let csv = std::fs::read_to_string(out.join("plan").join("plan_llamacpp.csv")).unwrap();
    let seq = csv.lines().next().unwrap().split(',').position(|h| h == "seq").unwrap();
    let f16: Vec<&str> = csv.lines().map(|l| l.split(',').collect::<Vec<_>>()).find(|row| row[1] == "f16").unwrap();
    let ctx: usize = f16[seq].parse().unwrap();
    let cfg = DecoderConfig::preset("qwen2.5-32b").unwrap();
    let tensors = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
    let need = |ctx| {
        let l = Launch { ctx, outputs: Some(1), ..Launch::default() };
        memory(&cfg, &tensors, &l).unwrap().gpu.total() + process::beyond(&cfg, &l, true, ctx as u64).total()
    };
    let budget = vram_lab::hw::Card::parse("rtx4090").unwrap().total_bytes() - (256 << 20);
    assert!(ctx > 4096 && need(ctx) <= budget && need(ctx + 256) > budget, "{ctx}");
    for (extra, needle) in [
        (vec!["--cards", "24GiB"], "--cards names two cards or more"),
        (
            vec!["--engine", "lab", "--margin-mib", "512"],
            "--margin-mib and --gguf-types are flags of --engine llama.cpp",
        ),
    ] {
        let base: Vec<&str> =
            if extra.contains(&"lab") { vec!["plan", "--model", "synthetic:qwen2.5-7b"] } else { args.to_vec() };
        let extra: Vec<&str> = extra.into_iter().filter(|a| *a != "--engine" && *a != "lab").collect();
        let o = lab(&[&base[..], &extra[..]].concat());
        let t = text(&o);
        assert!(!o.status.success() && t.contains(needle) && !t.contains("panicked"), "{extra:?}:\n{t}");
    }
}

/// The 42 llama-server launches run with `plan --engine llama.cpp`'s flags on emulated RTX 4090
/// and A4000 cards (20 dense on an H200; 12 of Qwen3-30B-A3B and Mixtral with `--n-cpu-moe`, 4
/// of Gemma 3 and 6 of gpt-oss-20b on 8 GiB, 12 GiB and A4000 cards on an H100), every prompt
/// filling the context (`scripts/gpu/llamacpp_serve.sh`):
/// each loaded and answered without running out of memory, the plan's figure is what the
/// estimator gives today where nothing it counts since changed, the server's own buffers equal the
/// estimate, and nvidia-smi stays within 64 MiB of it.
#[test]
fn every_planned_server_launch_fits_its_card() {
    use clap::ValueEnum;
    use std::io::Read;
    use std::path::Path;
    use vram_lab::estimate::llamacpp::{mmq_weights, process};
    use vram_lab::experiments::check::llamacpp::parse_log;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results");
    // Each folder's launches ran with the flags the estimator of its day chose. The mixtures' plans
    // came before llama.cpp's fused kernels were counted, every quantized cache's before its
    // Hadamard rotations were (up to 10.1 MiB more now): their plan figure is not today's; the
    // rest holds for them too.
    let mut n = 0;
    let unrotated = |l: &Launch| !l.cache_k.is_quantized() && !l.cache_v.is_quantized();
    let none = |_: &Launch| false;
    let every = |_: &Launch| true;
    for (dir, same_plan) in [
        (root.join("h200/2026-11-27-llamacpp-server/run-2/launches"), &unrotated as &dyn Fn(&Launch) -> bool),
        (root.join("h100/2026-12-06-llamacpp-moe/server/launches"), &none),
        (root.join("h100/2026-12-06-llamacpp-gemma/server/launches"), &unrotated),
        (root.join("h100/2026-12-06-llamacpp-gpt-oss/server/launches"), &every),
    ] {
        let csv = std::fs::read_to_string(dir.join("server_launches.csv")).unwrap();
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |row: &[&str], name: &str| row[head.iter().position(|h| *h == name).unwrap()].to_string();
        let ncmoe = |row: &[&str]| head.iter().position(|h| *h == "ncmoe").and_then(|i| row[i].parse().ok());
        for line in lines {
            let row: Vec<&str> = line.split(',').collect();
            let f = |name: &str| col(&row, name).parse::<f64>().unwrap();
            let id = col(&row, "id");
            assert_eq!((f("loaded"), f("http"), f("oom")), (1.0, 200.0, 0.0), "launch {id}");
            assert!(f("smi_peak_mib") <= f("card_mib"), "launch {id}");
            let cfg = DecoderConfig::preset(&col(&row, "preset")).unwrap();
            let ty = FileType::from_str(&col(&row, "type"), true).unwrap();
            let cache = |c: &str| CacheType::from_str(&col(&row, c), true).unwrap();
            let ngl = f("ngl") as usize;
            let l = Launch {
                ctx: f("ctx") as usize,
                gpu_layers: (ngl < 99).then_some(ngl),
                flash: true,
                cache_k: cache("ctk"),
                cache_v: cache("ctv"),
                batch: f("batch") as usize,
                ubatch: f("ubatch") as usize,
                outputs: Some(1),
                n_cpu_moe: ncmoe(&row),
                ..Launch::default()
            };
            let tensors = plan(&cfg, FileTypes::Llama(ty));
            let m = memory(&cfg, &tensors, &l).unwrap();
            let need = (m.gpu.total() + process::beyond(&cfg, &l, mmq_weights(&tensors), l.ctx as u64).total()) as f64
                / 1048576.0;
            assert!(
                !same_plan(&l) || (need - f("predicted_mib")).abs() < 1.0,
                "launch {id}: the plan said {}, the estimate says {need}",
                f("predicted_mib")
            );
            assert!(
                (f("smi_peak_mib") - need).abs() <= 64.0,
                "launch {id}: nvidia-smi {} against {need:.0}",
                f("smi_peak_mib")
            );
            let mut log = String::new();
            let gz = std::fs::File::open(dir.join(format!("launch-{id}.log.gz"))).unwrap();
            flate2::read::GzDecoder::new(gz).read_to_string(&mut log).unwrap();
            let measured = parse_log(&log).unwrap();
            let predicted = [m.gpu.model, m.gpu.context, m.gpu.compute].map(|b| b as f64 / 1048576.0);
            // The model, the KV cache and the compute buffer exactly, a quantized cache's rotations
            // included.
            for (mm, p) in measured.iter().zip(predicted) {
                assert!((mm - p).abs() <= 0.25, "launch {id}: buffers {measured:?} against {predicted:?}");
            }
            n += 1;
        }
    }
    assert_eq!(n, 42);
}

/// Over two GPUs (`--cards`, llama.cpp's `-sm layer`): one row per GPU and the host in
/// `estimate_llamacpp_devices.csv`, the GPUs' model and KV buffers adding up to one GPU's, the
/// layers moved by `--ts`; `--ts` and `--cards` that disagree, and `--ts` without llama.cpp, refused.
#[test]
fn estimate_over_two_gpus_per_device() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let args = [
            &["estimate", "--engine", "llama.cpp", "--model", "synthetic:qwen2.5-14b", "--seq", "8192"][..],
            extra,
            &["--out", out.to_str().unwrap()],
        ]
        .concat();
        let o = lab(&args);
        assert!(o.status.success(), "{}", text(&o));
        let t = std::fs::read_to_string(out.join("estimate/estimate_llamacpp_devices.csv")).unwrap();
        t.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>()).collect::<Vec<_>>()
    };
    let one = run("one", &[]);
    assert_eq!(one.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), ["cuda0", "host"]);
    let two = run("two", &["--cards", "rtx4090,rtx4090"]);
    assert_eq!(two.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), ["cuda0", "cuda1", "host"]);
    let f = |r: &[String], c: usize| r[c].parse::<f64>().unwrap();
    for c in [2, 3] {
        assert!((f(&two[0], c) + f(&two[1], c) - f(&one[0], c)).abs() < 0.01, "column {c}");
    }
    assert!(two[..2].iter().all(|r| f(r, 5) > f(r, 2) + f(r, 3) + f(r, 4)));
    // Three shares to one: cuda0 holds about three quarters of the 48 layers' cache.
    let skew = run("skew", &["--cards", "rtx4090,rtx4090", "--ts", "3,1"]);
    let share = f(&skew[0], 3) / (f(&skew[0], 3) + f(&skew[1], 3));
    assert!((0.7..0.8).contains(&share), "{share}");
    for (extra, needle) in [
        (&["--engine", "llama.cpp", "--cards", "rtx4090,rtx4090", "--ts", "1,2,3"][..], "3 shares for 2 cards"),
        (&["--ts", "1,1"][..], "--ts is a flag of --engine llama.cpp"),
        (&["--engine", "llama.cpp", "--ts", "1,-1"][..], "a share is a number of 0 or more"),
    ] {
        let o = lab(&[&["estimate", "--model", "synthetic:tiny"][..], extra].concat());
        let t = text(&o);
        assert!(!o.status.success() && t.contains(needle) && !t.contains("panicked"), "{extra:?}:\n{t}");
    }
}

/// `plan --engine llama.cpp --cards 12GiB,8GiB`: every layer on the two cards, each card's need
/// within it less the margin, what the estimate gives for the printed `-ts`; and a context at least
/// as long as llama.cpp's default split (each card's free memory) reaches.
#[test]
fn plan_over_two_cards_balances_the_split() {
    use clap::ValueEnum;
    use vram_lab::estimate::llamacpp::{mmq_weights, process};
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p");
    let o = lab(&[
        "plan",
        "--engine",
        "llama.cpp",
        "--model",
        "synthetic:llama-3.1-8b",
        "--gguf-types",
        "bf16",
        "--cards",
        "12GiB,8GiB",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let t = std::fs::read_to_string(out.join("plan/plan_llamacpp_cards.csv")).unwrap();
    let rows: Vec<Vec<String>> = t.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let cfg = DecoderConfig::preset("llama-3.1-8b").unwrap();
    let tensors = plan(&cfg, FileTypes::Llama(FileType::Bf16));
    for pair in rows.chunks(2) {
        let ctx: usize = pair[0][3].parse().unwrap();
        let flags = pair[0][6..].join(",");
        let ts: Vec<f64> =
            flags.split("-ts ").nth(1).unwrap().trim_end_matches('"').split(',').map(|x| x.parse().unwrap()).collect();
        let cache = CacheType::from_str(&pair[0][1], true).unwrap();
        let l = Launch { ctx, cache_k: cache, cache_v: cache, outputs: Some(1), tensor_split: ts, ..Launch::default() };
        let needs = |l: &Launch| -> Vec<f64> {
            let beyond = process::beyond(&cfg, l, mmq_weights(&tensors), l.ctx as u64).total();
            let m = memory(&cfg, &tensors, l).unwrap();
            assert!(m.pipeline);
            m.gpus.iter().map(|b| (b.total() + beyond) as f64 / 1048576.0).collect()
        };
        let n = needs(&l);
        for (d, row) in pair.iter().enumerate() {
            let (need, card): (f64, f64) = (row[4].parse().unwrap(), row[5].parse().unwrap());
            assert!(need <= card - 256.0, "{row:?}");
            assert!((need - n[d]).abs() < 0.01, "{row:?}: the estimate says {}", n[d]);
        }
        // llama.cpp's default split over the same cards, one cell step further, does not fit both.
        let context = process::CONTEXT as f64 / 1048576.0;
        let default = Launch { ctx: ctx + 256, tensor_split: vec![12288.0 - context, 8192.0 - context], ..l };
        let over = needs(&default).iter().zip([12288.0 - 256.0, 8192.0 - 256.0]).any(|(n, cap)| *n > cap);
        assert!(over, "the default split reaches past {ctx}");
    }
}
