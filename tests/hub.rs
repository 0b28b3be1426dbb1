//! `--model org/name` end to end against a Hub stand-in on 127.0.0.1 (tests/common/hub_server.rs:
//! repo info, `resolve` with etag / x-repo-commit headers, weights answered with a redirect as the
//! Hub answers LFS files) serving the fixture model in a real repo's layout (two shards and their
//! index). The download lands in `--cache-dir` and generates what the fixture directory generates;
//! a second run without the server loads from the cache; a missing repo, server or shard is one
//! line and a non-zero exit within seconds.

#[path = "common/hub_server.rs"]
mod hub_server;
#[path = "common/snapshot.rs"]
mod snapshot;

use hub_server::{fixture, repo_files, Attack, Hub, Repo, COMMIT, COMMIT2, GENERATE, SHARDS};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// Runs the lab against `endpoint` (`hub_server::lab_at`) with the cache under `cache`.
fn lab(endpoint: &str, cache: &Path, args: &[&str]) -> (Output, Duration) {
    let t0 = Instant::now();
    let o = hub_server::lab_at(endpoint, &cache.join("hf-home"))
        .current_dir(cache)
        .args(args)
        .args(["--cache-dir", cache.join("hf").to_str().unwrap(), "--device", "cpu", "--quiet"])
        .output()
        .unwrap();
    (o, t0.elapsed())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn generate(endpoint: &str, cache: &Path, model: &str) -> (serde_json::Value, String, Duration) {
    let (o, took) = lab(endpoint, cache, &[&GENERATE[..], &["--model", model]].concat());
    assert!(o.status.success(), "{model}:\n{}", text(&o));
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}:\n{}", text(&o)));
    (v, String::from_utf8_lossy(&o.stderr).to_string(), took)
}

/// Fails with one line naming what it should, in bounded time, without a panic.
fn fails_fast(endpoint: &str, cache: &Path, model: &str, needles: &[&str]) -> Duration {
    let (o, took) = lab(endpoint, cache, &[&GENERATE[..], &["--model", model]].concat());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{model} should fail as bad input:\n{t}");
    assert!(!t.contains("panicked"), "{model} panicked:\n{t}");
    assert_eq!(t.trim().lines().count(), 1, "{model}: expected one line:\n{t}");
    for n in needles {
        assert!(t.contains(n), "{model}: expected `{n}` in:\n{t}");
    }
    assert!(took < Duration::from_secs(5), "{model} took {took:?}:\n{t}");
    took
}

#[test]
fn hub_download_cache_and_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let files = repo_files();
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny".to_string(), Repo::new(files.clone()));
    repos.insert("org/files-only".to_string(), Repo { api: false, ..Repo::new(files.clone()) });
    repos.insert("org/stall".to_string(), Repo::new(files.clone()).attack(SHARDS[1], Attack::Stall));
    let mut broken = files.clone();
    broken.remove(SHARDS[1]);
    repos.insert("org/broken".to_string(), Repo { withheld: vec![SHARDS[1].to_string()], ..Repo::new(broken) });
    let hub = Hub::start(repos);
    let endpoint = hub.addr.clone();

    // The same model from the fixture directory: what the download must generate.
    let (want, _, _) = generate(&endpoint, tmp.path(), fixture().to_str().unwrap());

    let (got, _, took) = generate(&endpoint, tmp.path(), "org/tiny");
    eprintln!("first run (download + load + generate): {took:?}");
    for k in ["prompt_ids", "generated_ids", "text"] {
        assert_eq!(got[k], want[k], "{k} differs between the hub download and the fixture directory");
    }
    assert!(want["text"].is_string(), "the tokenizer should have come with the model");
    assert_eq!(got["model"], "hub:org/tiny");

    // hf-hub's cache layout (huggingface-cli shares it): one snapshot holding every file of the repo, refs/main naming it.
    let repo_cache = tmp.path().join("hf/models--org--tiny");
    assert_eq!(std::fs::read_to_string(repo_cache.join("refs/main")).unwrap(), COMMIT);
    let snapshot = repo_cache.join("snapshots").join(COMMIT);
    for (name, bytes) in &files {
        assert_eq!(
            &std::fs::read(snapshot.join(name)).unwrap(),
            bytes,
            "{name} in the cache differs from the server's"
        );
    }
    let fetched = |log: &[String]| log.iter().filter(|p| p.contains("/resolve/")).count();
    let first = hub.requests();
    assert_eq!(fetched(&first), files.len(), "one request per file, no probe: {first:?}");

    // Again with the server up: only the repo probe goes out, every file comes from the cache.
    let (again, _, _) = generate(&endpoint, tmp.path(), "org/tiny");
    assert_eq!(again["generated_ids"], want["generated_ids"]);
    let second = hub.requests()[first.len()..].to_vec();
    assert_eq!(second, ["/api/models/org/tiny/revision/main"]);

    // A mirror without the repo API: config.json says the repo is there, the index its shards.
    let (files_only, _, _) = generate(&endpoint, tmp.path(), "org/files-only");
    assert_eq!(files_only["generated_ids"], want["generated_ids"]);
    assert!(tmp.path().join("hf/models--org--files-only/snapshots").join(COMMIT).join(SHARDS[1]).is_file());

    // A shard the index names that the server does not serve.
    let t = fails_fast(
        &endpoint,
        tmp.path(),
        "org/broken",
        &["hub: cannot fetch", SHARDS[1], "org/broken", &endpoint, "404"],
    );
    eprintln!("shard missing on the server: {t:?}");
    // A shard whose download stops halfway: abandoned after 2 s without a byte.
    let t = fails_fast(
        &endpoint,
        tmp.path(),
        "org/stall",
        &["hub: cannot fetch", SHARDS[1], "org/stall", "nothing received for 2 s"],
    );
    eprintln!("download stalled halfway (2 s limit): {t:?}");
    // A repo the server does not have.
    let t = fails_fast(&endpoint, tmp.path(), "org/absent", &["hub: no model repo org/absent at", &endpoint, "404"]);
    eprintln!("missing repo (404): {t:?}");

    drop(hub);
    // No server: the cached copy loads, and stderr says where it came from.
    let (offline, stderr, took) = generate(&endpoint, tmp.path(), "org/tiny");
    eprintln!("offline run from the cache: {took:?}");
    assert_eq!(offline["generated_ids"], want["generated_ids"]);
    assert_eq!(offline["text"], want["text"]);
    assert!(stderr.contains(&format!("hub: {endpoint} unreachable; loading org/tiny from the cache")), "{stderr}");
    // No server and half a download (org/broken stopped at its second shard): not loaded.
    fails_fast(
        &endpoint,
        tmp.path(),
        "org/broken",
        &["hub: cannot reach", &endpoint, "org/broken", "no complete copy"],
    );
    // No server and nothing cached: connection refused is one line naming endpoint and repo.
    let t = fails_fast(
        &endpoint,
        tmp.path(),
        "org/other",
        &["hub: cannot reach", &endpoint, "org/other", "no complete copy"],
    );
    eprintln!("no server, nothing cached: {t:?}");

    // The repo moved on upstream: the new commit is fetched whole into its own snapshot, and
    // refs/main follows it, so no run mixes files of two commits.
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny".to_string(), Repo { commit: COMMIT2.into(), ..Repo::new(files.clone()) });
    let hub = Hub::start(repos);
    let (moved, _, _) = generate(&hub.addr, tmp.path(), "org/tiny");
    assert_eq!(moved["generated_ids"], want["generated_ids"]);
    assert_eq!(std::fs::read_to_string(repo_cache.join("refs/main")).unwrap(), COMMIT2);
    for name in files.keys() {
        assert!(
            repo_cache.join("snapshots").join(COMMIT2).join(name).is_file(),
            "{name} missing from the new snapshot"
        );
    }
}

/// A cache damaged by an earlier client (a shard cut short, an error page kept as config.json)
/// heals on the next run against an honest server: the damaged files alone are fetched again.
#[test]
fn a_damaged_cache_heals_on_an_honest_run() {
    let tmp = tempfile::tempdir().unwrap();
    let files = repo_files();
    let hub = Hub::start(BTreeMap::from([("org/tiny".to_string(), Repo::new(files.clone()))]));
    let (want, _, _) = generate(&hub.addr, tmp.path(), "org/tiny");
    let snap = tmp.path().join("hf/models--org--tiny/snapshots").join(COMMIT);
    let shard = std::fs::canonicalize(snap.join(SHARDS[0])).unwrap();
    std::fs::write(&shard, &files[SHARDS[0]][..files[SHARDS[0]].len() / 2]).unwrap();
    std::fs::write(std::fs::canonicalize(snap.join("config.json")).unwrap(), "<html>rate limited</html>").unwrap();
    let before = hub.requests().len();
    let (healed, stderr, _) = generate(&hub.addr, tmp.path(), "org/tiny");
    assert_eq!(healed["generated_ids"], want["generated_ids"]);
    for f in ["config.json", SHARDS[0]] {
        assert!(stderr.contains(&format!("hub: the cached {f} is damaged")), "{f}: {stderr}");
        assert_eq!(&std::fs::read(snap.join(f)).unwrap(), &files[f], "{f} is whole again");
    }
    let fetched: Vec<String> = hub.requests()[before..].iter().filter(|p| p.contains("/resolve/")).cloned().collect();
    assert_eq!(fetched.len(), 2, "only the damaged files fetched again: {fetched:?}");
}

/// Three processes into one empty cache at once, twenty rounds: every run loads the model. A link
/// another process made is success, a snapshot is never seen with a link removed, and no partial
/// or temporary link stays behind.
#[test]
fn three_processes_share_one_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = Hub::start(BTreeMap::from([("org/tiny".to_string(), Repo::new(repo_files()))]));
    let mut failed = Vec::new();
    for round in 0..20 {
        let cache = tmp.path().join(format!("round-{round}"));
        std::fs::create_dir_all(&cache).unwrap();
        let runs: Vec<_> = (0..3)
            .map(|_| {
                hub_server::lab_at(&hub.addr, &cache.join("hf-home"))
                    .args(GENERATE)
                    .args(["--model", "org/tiny", "--cache-dir", cache.join("hf").to_str().unwrap()])
                    .args(["--device", "cpu", "--quiet"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let o = run.wait_with_output().unwrap();
            if !o.status.success() {
                failed.push(format!("round {round}: {}", text(&o)));
            }
        }
        let left: Vec<String> = walk(&cache.join("hf"))
            .into_iter()
            .filter(|n| n.ends_with(".incomplete") || n.ends_with(".link"))
            .collect();
        assert!(left.is_empty(), "round {round} left {left:?}");
    }
    assert!(failed.is_empty(), "{} of 60 runs failed:\n{}", failed.len(), failed.join("\n"));
}

/// Every name under `dir`, links not followed.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.file_name().to_string_lossy().to_string());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// One GGUF file of a Hub repo, `--model org/name:file.gguf`: fetched into the cache and loaded
/// with the tokenizer the file carries (the same ids as the local file), `estimate` prices it from
/// the cache, a second run with the server gone uses the cached file, and a file the repo lacks is
/// one line within seconds.
#[test]
fn hub_gguf_file() {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("tiny-q8_0.gguf");
    let (o, _) = lab(
        "http://127.0.0.1:9",
        tmp.path(),
        &["quantize", "--model", fixture().to_str().unwrap(), "--type", "q8_0", "--to", local.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut files = BTreeMap::new();
    files.insert("tiny-q8_0.gguf".to_string(), std::fs::read(&local).unwrap());
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny-gguf".to_string(), Repo::new(files));
    let hub = Hub::start(repos);
    let endpoint = hub.addr.clone();

    let (want, _, _) = generate(&endpoint, tmp.path(), local.to_str().unwrap());
    let (got, _, _) = generate(&endpoint, tmp.path(), "org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(got["model"], "hub:org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(got["generated_ids"], want["generated_ids"]);
    // No tokenizer.json anywhere near: the text is decoded by the file's own tokenizer.
    assert!(got["text"].is_string() && got["text"] == want["text"], "{got}");
    let cached = tmp.path().join("hf/models--org--tiny-gguf/snapshots").join(COMMIT).join("tiny-q8_0.gguf");
    assert_eq!(std::fs::read(&cached).unwrap(), std::fs::read(&local).unwrap());
    let t = fails_fast(
        &endpoint,
        tmp.path(),
        "org/tiny-gguf:absent.gguf",
        &["hub: cannot fetch absent.gguf of org/tiny-gguf at", &endpoint, "404"],
    );
    eprintln!("file missing on the server: {t:?}");

    drop(hub);
    let (offline, _, _) = generate(&endpoint, tmp.path(), "org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(offline["generated_ids"], want["generated_ids"]);
    let (o, _) = lab(
        &endpoint,
        tmp.path(),
        &[
            "estimate",
            "--model",
            "org/tiny-gguf:tiny-q8_0.gguf",
            "--precisions",
            "q4",
            "--out",
            tmp.path().join("est").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(tmp.path().join("est/estimate/estimate_ledger.csv").is_file());
}

/// Qwen2.5-7B's GGUF header in llama.cpp's Q4_K_M recipe, as the lab writes it (no tokenizer), and
/// the file's whole length; `range` writes the tensors of that range of the plan only (a part of
/// a split file), `split` the `split.*` keys.
fn q7_gguf_header(range: std::ops::Range<usize>, split: Option<(u16, u16)>) -> (Vec<u8>, u64) {
    use candle_core::quantized::gguf_file::Value;
    use vram_lab::model::gguf::header::Header;
    use vram_lab::model::gguf::recipe::FileType;
    use vram_lab::model::gguf::writer;
    let cfg = vram_lab::model::DecoderConfig::preset("qwen2.5-7b").unwrap();
    let plan = writer::FileTypes::Llama(FileType::Q4KM);
    let tensors = writer::plan(&cfg, plan)[range].to_vec();
    let mut md = writer::metadata(&cfg, plan, None).unwrap();
    if let Some((no, count)) = split {
        md.push(("split.no".into(), Value::U16(no)));
        md.push(("split.count".into(), Value::U16(count)));
    }
    let mut w = std::io::Cursor::new(Vec::new());
    writer::write_header(&mut w, &md, &tensors).unwrap();
    let head = w.into_inner();
    let len = Header::from_prefix(&head, u64::MAX, Path::new("q7")).unwrap().unwrap().needs();
    (head, len)
}

/// A sparse file of the stand-in Hub: its name, first bytes and length.
type Sparse = (String, Vec<u8>, u64);

/// Qwen2.5-7B's safetensors in two BF16 shards: each shard's header (its 8-byte length and JSON)
/// and length, and the index naming them.
fn q7_safetensors() -> (Vec<Sparse>, Vec<u8>) {
    let cfg = vram_lab::model::DecoderConfig::preset("qwen2.5-7b").unwrap();
    let specs = cfg.tensor_specs();
    let half = specs.len() / 2;
    let names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    let mut weight_map = serde_json::Map::new();
    let mut shards = Vec::new();
    for (i, part) in [&specs[..half], &specs[half..]].into_iter().enumerate() {
        let (mut head, mut at) = (serde_json::Map::new(), 0u64);
        for t in part {
            let bytes = t.elem_count() as u64 * 2;
            head.insert(
                t.name.clone(),
                serde_json::json!({"dtype": "BF16", "shape": t.shape, "data_offsets": [at, at + bytes]}),
            );
            weight_map.insert(t.name.clone(), names[i].into());
            at += bytes;
        }
        let json = serde_json::to_vec(&head).unwrap();
        let mut out = (json.len() as u64).to_le_bytes().to_vec();
        out.extend(json);
        let len = out.len() as u64 + at;
        shards.push((names[i].to_string(), out, len));
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    (shards, serde_json::to_vec(&index).unwrap())
}

fn ledger_csv(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("estimate/estimate_ledger.csv")).unwrap()
}

/// The fetched share `estimate` prints for a Hub model (`… (0.0123 % of them)`).
fn fetched_pct(out: &str) -> f64 {
    let line = out.lines().find(|l| l.contains("fetched by Range requests")).unwrap_or_else(|| panic!("{out}"));
    let pct = line.rsplit_once(" (").and_then(|(_, p)| p.split_once(" % of them")).map(|(p, _)| p);
    pct.and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no share in `{line}`"))
}

/// `estimate` sizes a Hub model from headers alone: a 4.4 GiB Q4_K_M GGUF (whole, split in two
/// parts, and from a server that ignores Range) and a 15 GB safetensors repo give the ledger the
/// local file or the config.json folder gives, fetching under 1 % of the files, every request for
/// a weight file a Range request.
#[test]
fn hub_sizing_reads_headers_only() {
    let tmp = tempfile::tempdir().unwrap();
    let n = vram_lab::model::gguf::writer::plan(
        &vram_lab::model::DecoderConfig::preset("qwen2.5-7b").unwrap(),
        vram_lab::model::gguf::writer::FileTypes::Llama(vram_lab::model::gguf::recipe::FileType::Q4KM),
    )
    .len();
    let (head, len) = q7_gguf_header(0..n, None);
    let (p1, l1) = q7_gguf_header(0..n / 2, Some((0, 2)));
    let (p2, l2) = q7_gguf_header(n / 2..n, Some((1, 2)));
    let gguf = Repo::new(BTreeMap::new())
        .sparse("q7-q4_k_m.gguf", head.clone(), len)
        .sparse("q7-00001-of-00002.gguf", p1, l1)
        .sparse("q7-00002-of-00002.gguf", p2, l2);
    let stubborn = Repo::new(BTreeMap::new())
        .sparse("q7-q4_k_m.gguf", head.clone(), len)
        .attack("q7-q4_k_m.gguf", Attack::IgnoreRange);
    let (shards, index) = q7_safetensors();
    let config = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/models/qwen2.5-7b.json")).unwrap();
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), config.clone());
    files.insert(hub_server::INDEX.to_string(), index);
    let mut st = Repo::new(files);
    for (name, h, l) in &shards {
        st = st.sparse(name, h.clone(), *l);
    }
    let mut repos = BTreeMap::new();
    repos.insert("org/q7-gguf".to_string(), gguf);
    repos.insert("org/q7-stubborn".to_string(), stubborn);
    repos.insert("org/q7".to_string(), st);
    let hub = Hub::start(repos);

    // The local references: the GGUF as a sparse file, the config.json alone in a folder.
    let local = tmp.path().join("q7-q4_k_m.gguf");
    std::fs::write(&local, &head).unwrap();
    std::fs::OpenOptions::new().write(true).open(&local).unwrap().set_len(len).unwrap();
    let only_config = tmp.path().join("q7-config");
    std::fs::create_dir(&only_config).unwrap();
    std::fs::write(only_config.join("config.json"), &config).unwrap();
    let estimate = |model: &str, out: &str, precisions: &str| {
        let dir = tmp.path().join(out);
        let args = [
            "estimate",
            "--model",
            model,
            "--precisions",
            precisions,
            "--card",
            "rtx4090",
            "--out",
            dir.to_str().unwrap(),
        ];
        let (o, took) = lab(&hub.addr, tmp.path(), &args);
        assert!(o.status.success(), "{model}:\n{}", text(&o));
        assert!(took < Duration::from_secs(60), "{model} took {took:?}");
        (ledger_csv(&dir), text(&o))
    };
    let (want, _) = estimate(local.to_str().unwrap(), "local-gguf", "q4_k_m");
    for (model, out) in [
        ("org/q7-gguf:q7-q4_k_m.gguf", "hub-gguf"),
        ("org/q7-gguf:q7-00002-of-00002.gguf", "hub-split"),
        ("org/q7-stubborn:q7-q4_k_m.gguf", "hub-stubborn"),
    ] {
        let (got, said) = estimate(model, out, "q4_k_m");
        assert_eq!(got, want, "{model}");
        assert!(fetched_pct(&said) < 1.0, "{model}: {said}");
    }
    let (want, _) = estimate(only_config.to_str().unwrap(), "local-st", "bf16,q4_k_m");
    let (got, said) = estimate("org/q7", "hub-st", "bf16,q4_k_m");
    assert_eq!(got, want);
    assert!(fetched_pct(&said) < 1.0, "{said}");
    assert!(said.contains("the headers list 7,615,616,512 parameters in BF16"), "{said}");
    let weights: Vec<_> =
        hub.seen().into_iter().filter(|s| s.path.ends_with(".gguf") || s.path.ends_with(".safetensors")).collect();
    assert!(weights.len() >= 6 && weights.iter().all(|s| s.range.is_some()), "{weights:?}");
    // Nothing was downloaded into the cache but the metadata files.
    let cached = snapshot::snapshot(&tmp.path().join("hf"), None);
    assert!(
        cached.values().all(|seen| !matches!(seen, snapshot::Seen::File(len, ..) if *len >= 1 << 20)),
        "{cached:?}"
    );
}
