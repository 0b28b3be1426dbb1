//! Hostile input, tried as a user would: flags, config.json, safetensors, GGUF and tokenizer files
//! that are missing, truncated, absurd or inconsistent. Every case runs the binary in a scratch
//! folder under a time limit and must exit non-zero without a panic, print one line on stderr
//! (`error: …`, naming what is wrong), and write nothing outside the run's `--out` folder.
//!
//! The table of every case (the command, the exit code, the line) is docs/hostile-inputs.md: the
//! test writes target/hostile-inputs.md and fails when the committed table differs; regenerate
//! it with `VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A hang guard, not a benchmark: every case answers in well under a second on CPU.
const TIME_LIMIT: Duration = Duration::from_secs(60);

struct Case {
    group: &'static str,
    args: Vec<String>,
    /// Files written into the scratch folder before the run: (relative path, bytes).
    files: Vec<(String, Vec<u8>)>,
    env: Vec<(&'static str, String)>,
    /// A word or phrase the error line must contain.
    expect: &'static str,
}

fn case(group: &'static str, args: &str, expect: &'static str) -> Case {
    Case { group, args: args.split_whitespace().map(str::to_string).collect(), files: vec![], env: vec![], expect }
}

impl Case {
    fn file(mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Self {
        self.files.push((path.to_string(), bytes.into()));
        self
    }
    fn files(mut self, files: Vec<(String, Vec<u8>)>) -> Self {
        self.files.extend(files);
        self
    }
    fn env(mut self, key: &'static str, value: &str) -> Self {
        self.env.push((key, value.to_string()));
        self
    }
}

/// Every file under `dir`, relative.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    stdout: String,
    hung: bool,
    stray: Vec<PathBuf>,
}

fn run(c: &Case) -> Outcome {
    let scratch = tempfile::tempdir().unwrap();
    for (path, bytes) in &c.files {
        let p = scratch.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let before = tree(scratch.path());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vram-lab"));
    cmd.args(&c.args).args(["--quiet", "--out", "out"]).current_dir(scratch.path());
    cmd.env("HF_HOME", scratch.path().join("out/hf")).env_remove("HF_ENDPOINT").env_remove("RUST_BACKTRACE");
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).ok();
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut se, &mut s).ok();
        s
    });
    let start = Instant::now();
    let (code, hung) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (status.code(), false);
        }
        if start.elapsed() > TIME_LIMIT {
            child.kill().ok();
            child.wait().ok();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let after = tree(scratch.path());
    let stray = after.difference(&before).filter(|p| !p.starts_with("out")).cloned().collect();
    Outcome { code, stderr: err_t.join().unwrap(), stdout: out_t.join().unwrap(), hung, stray }
}

// ---- the inputs -------------------------------------------------------------------------

fn tiny_json() -> serde_json::Value {
    serde_json::to_value(common::tiny()).unwrap()
}

/// tiny's config.json with `key` set to `value`.
fn config_with(key: &str, value: serde_json::Value) -> Vec<u8> {
    let mut v = tiny_json();
    v[key] = value;
    serde_json::to_vec_pretty(&v).unwrap()
}

/// A valid tiny model directory (config.json + one F32 safetensors), as files.
fn model_dir(name: &str) -> Vec<(String, Vec<u8>)> {
    let tmp = tempfile::tempdir().unwrap();
    common::write_dir(tmp.path(), &common::tiny(), 7, candle_core::DType::F32, 1);
    ["config.json", "model.safetensors"].iter().map(|f| (format!("{name}/{f}"), std::fs::read(tmp.path().join(f)).unwrap())).collect()
}

/// `files` with the one named `path` replaced by `f(bytes)`.
fn with(mut files: Vec<(String, Vec<u8>)>, path: &str, f: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Vec<(String, Vec<u8>)> {
    let i = files.iter().position(|(p, _)| p == path).unwrap();
    let bytes = std::mem::take(&mut files[i].1);
    files[i].1 = f(bytes);
    files
}

/// A safetensors file's JSON header and data, split.
fn split_safetensors(bytes: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), bytes[8 + n..].to_vec())
}

fn join_safetensors(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let h = serde_json::to_vec(header).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

/// The tiny model's safetensors with `f` applied to its header.
fn edit_header(f: impl Fn(&mut serde_json::Value)) -> impl FnOnce(Vec<u8>) -> Vec<u8> {
    move |bytes| {
        let (mut h, data) = split_safetensors(&bytes);
        f(&mut h);
        join_safetensors(&h, &data)
    }
}

/// A Q4 GGUF of the tiny model, written once by the lab itself.
fn tiny_gguf() -> Vec<u8> {
    static GGUF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    GGUF.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tiny.gguf");
        let o = common::lab_quiet(&["quantize", "--model", "synthetic:tiny", "--to", path.to_str().unwrap()]);
        assert!(o.status.success(), "{}", common::output_text(&o));
        std::fs::read(path).unwrap()
    })
    .clone()
}

fn patched(mut bytes: Vec<u8>, at: usize, with: &[u8]) -> Vec<u8> {
    bytes[at..at + with.len()].copy_from_slice(with);
    bytes
}

/// The byte offset of a GGUF metadata string value `value` (its length prefix starts 8 before).
fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes.windows(needle.len()).position(|w| w == needle).unwrap()
}

fn cases() -> Vec<Case> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2/tokenizer.json");
    let tokenizer = std::fs::read(fixture).unwrap();
    let gguf = tiny_gguf();
    let gen_dir = "generate --model m --prompt-ids 1,2 --max-new-tokens 2";
    let gen_gguf = "generate --model m.gguf --prompt-ids 1,2 --max-new-tokens 2";
    // The fixture's tokenizer has 320 ids; this model's vocabulary 100.
    let mut small_vocab = common::tiny();
    small_vocab.vocab_size = 100;
    vec![
        // The command line.
        case("cli", "estimate --batch 0", "--batch"),
        case("cli", "estimate --seq 0", "--seq"),
        case("cli", "estimate --seq 99999999999", "--seq"),
        case("cli", "estimate --batch 99999999999", "--batch"),
        case("cli", "estimate --model synthetic:qwen2.5-72b --seq 16777216 --batch 65536", "too large to price"),
        case("cli", "estimate --gpus 0", "--gpus"),
        case("cli", "estimate --zero 7", "--zero"),
        case("cli", "estimate --precisions int8", "int8"),
        case("cli", "plan --seq 0", "--seq"),
        case("cli", "generate --max-new-tokens 0", "--max-new-tokens"),
        case("cli", "generate --prompt-ids 999999999,5", "outside the vocabulary"),
        case("cli", "generate --prompt-ids -1", "-1"),
        case("cli", "generate --prompt-ids 1,,2", "--prompt-ids"),
        case("cli", "generate --temperature nan", "--temperature"),
        case("cli", "generate --top-p 0", "--top-p"),
        case("cli", "info --device cuda", "CUDA"),
        case("cli", "info --device cuda:x", "CUDA"),
        case("cli", "info --device tpu", "unknown device"),
        case("cli", "plan --card 0GiB", "out of range"),
        case("cli", "plan --card 99999999999GiB", "out of range"),
        case("cli", "plan --card 1e30GiB", "unknown card"),
        case("cli", "plan --card banana", "unknown card"),
        case("cli", "estimate --model synthetic:nope", "unknown preset"),
        case("cli", "estimate --model no/such/dir/at/all", "no such model"),
        case("cli", "kv --start 0", "--start"),
        case("cli", "kv --start 8192 --max 1024", "--start"),
        case("cli", "frag --blocks 0", "--blocks"),
        case("cli", "frag --block-mib 99999999999", "--block-mib"),
        case("cli", "offload --gpu-budget=-5GiB", "out of range"),
        case("cli", "offload --gpu-budget lots", "not a size"),
        case("cli", "bandwidth --reps 0", "--reps"),
        case("cli", "bandwidth --host-mib 1000000000", "--host-mib"),
        case("cli", "train --steps 0", "--steps"),
        case("cli", "run --stages nope", "unknown stage"),
        case("cli", "leaks --threshold-mib nan", "--threshold-mib"),
        case("cli", "estimate", "out").file("out", "a file where the run folder should go"),
        // config.json, through `estimate --config`.
        case("config.json", "estimate --config missing.json", "cannot read"),
        case("config.json", "estimate --config c.json", "not a usable Qwen2 config").file("c.json", ""),
        case("config.json", "estimate --config c.json", "not a usable Qwen2 config").file("c.json", "{"),
        case("config.json", "estimate --config c.json", "not a usable Qwen2 config").file("c.json", "[1, 2]"),
        case("config.json", "estimate --config c.json", "num_attention_heads").file("c.json", config_with("hidden_size", 250.into())),
        case("config.json", "estimate --config c.json", "num_key_value_heads").file("c.json", config_with("num_key_value_heads", 3.into())),
        case("config.json", "estimate --config c.json", "vocab_size must be positive").file("c.json", config_with("vocab_size", 0.into())),
        case("config.json", "estimate --config c.json", "intermediate_size").file("c.json", config_with("intermediate_size", 1_000_000_000_000_000u64.into())),
        case("config.json", "estimate --config c.json", "num_hidden_layers").file("c.json", config_with("num_hidden_layers", 1_000_000_000_000u64.into())),
        case("config.json", "estimate --config c.json", "even").file("c.json", config_with("hidden_size", 12.into())),
        case("config.json", "estimate --config c.json", "int8").file("c.json", config_with("torch_dtype", "int8".into())),
        case("config.json", "estimate --config c.json", "rms_norm_eps").file("c.json", config_with("rms_norm_eps", (-1.0).into())),
        case("config.json", "estimate --config c.json", "hidden_size").file("c.json", config_with("hidden_size", (-4).into())),
        case("config.json", "estimate --config c.json", "gelu").file("c.json", config_with("hidden_act", "gelu".into())),
        case("config.json", "estimate --config c.json", "max_position_embeddings").file("c.json", config_with("max_position_embeddings", 0.into())),
        case("config.json", "estimate --config c.json", "qwen2_moe").file("c.json", config_with("model_type", "qwen2_moe".into())),
        case("config.json", "estimate --config c.json", "num_experts").file("c.json", config_with("num_experts", 60.into())),
        // safetensors directories, through `generate --model m`.
        case("safetensors", gen_dir, "safetensors").file("m/config.json", serde_json::to_vec(&tiny_json()).unwrap()),
        case("safetensors", gen_dir, "model.safetensors").files(with(model_dir("m"), "m/model.safetensors", |_| vec![])),
        case("safetensors", gen_dir, "model.safetensors").files(with(model_dir("m"), "m/model.safetensors", |b| patched(b, 0, &u64::MAX.to_le_bytes()))),
        case("safetensors", gen_dir, "model.safetensors").files(with(model_dir("m"), "m/model.safetensors", |b| patched(b, 8, b"!!!!"))),
        case("safetensors", gen_dir, "model.safetensors").files(with(model_dir("m"), "m/model.safetensors", |b| b[..b.len() / 2].to_vec())),
        case("safetensors", gen_dir, "lm_head.weight").files(with(model_dir("m"), "m/model.safetensors", edit_header(|h| h["lm_head.weight"]["dtype"] = "I32".into()))),
        case("safetensors", gen_dir, "model.norm.weight").files(with(model_dir("m"), "m/model.safetensors", edit_header(|h| h["model.norm.weight"]["shape"] = serde_json::json!([64, 4])))),
        case("safetensors", gen_dir, "model.norm.weight").files(with(model_dir("m"), "m/model.safetensors", edit_header(|h| {
            let t = h.as_object_mut().unwrap().remove("model.norm.weight").unwrap();
            h["model.norm.weight_renamed"] = t;
        }))),
        case("safetensors", gen_dir, "missing.safetensors").files(model_dir("m")).file(
            "m/model.safetensors.index.json",
            serde_json::to_vec(&serde_json::json!({"weight_map": {"lm_head.weight": "missing.safetensors"}})).unwrap(),
        ),
        // GGUF files, through `estimate` (the header) and `generate` (the tensors).
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", vec![]),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", patched(gguf.clone(), 0, b"GGML")),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", gguf[..64].to_vec()),
        case("gguf", gen_gguf, "truncated").file("m.gguf", gguf[..gguf.len() * 9 / 10].to_vec()),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", patched(gguf.clone(), 8, &(1u64 << 60).to_le_bytes())),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", patched(gguf.clone(), 24, &(1u64 << 62).to_le_bytes())),
        case("gguf", "estimate --model m.gguf", "architecture").file("m.gguf", {
            let at = find(&gguf, b"qwen2");
            patched(gguf.clone(), at, b"llama")
        }),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", patched(gguf.clone(), 4, &99u32.to_le_bytes())),
        // Tokenizers, through `generate --tokenizer`.
        case("tokenizer", "generate --tokenizer missing.json --prompt hi", "missing.json"),
        case("tokenizer", "generate --tokenizer t.json --prompt hi", "t.json").file("t.json", "{"),
        case("tokenizer", "generate --tokenizer t.json --prompt hi", "t.json").file("t.json", r#"{"model": 5}"#),
        case("tokenizer", "generate --model m --tokenizer t.json --prompt hello_world_tokens --max-new-tokens 2", "outside the vocabulary")
            .files({
                let tmp = tempfile::tempdir().unwrap();
                common::write_dir(tmp.path(), &small_vocab, 7, candle_core::DType::F32, 1);
                ["config.json", "model.safetensors"].iter().map(|f| (format!("m/{f}"), std::fs::read(tmp.path().join(f)).unwrap())).collect()
            })
            .file("t.json", tokenizer),
        // The hub: a server that is not there.
        case("hub", "estimate --model org/name --cache-dir out/hf", "org/name").env("HF_ENDPOINT", "http://127.0.0.1:9"),
    ]
}

fn escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The line as the table keeps it: what depends on this machine (its free memory) as N.
fn stable(line: &str) -> String {
    match (line.find("1 to "), line.find(" (half the host")) {
        (Some(a), Some(b)) if a + 5 <= b => format!("{}N{}", &line[..a + 5], &line[b..]),
        _ => line.to_string(),
    }
}

#[test]
fn hostile_inputs_fail_cleanly() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut table = String::from(
        "# Hostile inputs\n\nEvery input `tests/hostile.rs` tries (CPU build, `--quiet --out out` added to each command): the exit code and the one line on stderr. None panics, hangs or writes outside `--out`.\nRegenerate: `VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile`.\n\n| input | command | exit | stderr |\n|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for c in &cases {
        let o = run(c);
        let cmd = c.args.join(" ");
        let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let line = lines.first().copied().unwrap_or("");
        let mut bad = Vec::new();
        if o.hung {
            bad.push(format!("still running after {TIME_LIMIT:?}"));
        }
        if o.code == Some(0) || o.code == Some(101) || o.code.is_none() {
            bad.push(format!("exit code {:?}", o.code));
        }
        if o.stderr.contains("panicked") || o.stdout.contains("panicked") {
            bad.push("panicked".into());
        }
        if lines.len() != 1 || !line.starts_with("error: ") {
            bad.push(format!("stderr is not one `error:` line: {:?}", o.stderr));
        }
        if !line.contains(c.expect) {
            bad.push(format!("`{}` not in the line", c.expect));
        }
        if !o.stray.is_empty() {
            bad.push(format!("wrote outside --out: {:?}", o.stray));
        }
        if !bad.is_empty() {
            failures.push(format!("[{}] {cmd}: {}\n  {line}", c.group, bad.join("; ")));
        }
        let code = o.code.map(|c| c.to_string()).unwrap_or_else(|| "killed".into());
        table.push_str(&format!("| {} | `{}` | {code} | {} |\n", c.group, escape(&cmd), escape(&stable(line))));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join("target/hostile-inputs.md"), &table).unwrap();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    let doc = root.join("docs/hostile-inputs.md");
    if std::env::var_os("VRAM_LAB_UPDATE_DOCS").is_some() {
        std::fs::write(&doc, &table).unwrap();
    }
    let committed = std::fs::read_to_string(&doc).unwrap_or_default();
    assert!(committed == table, "docs/hostile-inputs.md differs from what the cases print now (target/hostile-inputs.md): regenerate with VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile");
}

/// A GGUF cut short is named truncated, with its bytes, by `generate` (before any tensor is read)
/// and by `estimate`, which still prices it from its header.
#[test]
fn a_truncated_gguf_is_named_and_still_priced() {
    let gguf = tiny_gguf();
    let cut = gguf.len() * 9 / 10;
    let line = format!("m.gguf: truncated: {cut} of {} bytes", gguf.len());
    let o = run(&case("gguf", "generate --model m.gguf --prompt-ids 1,2", "").file("m.gguf", gguf[..cut].to_vec()));
    assert_eq!(o.code, Some(2));
    assert_eq!(o.stderr.trim(), format!("error: {line}"));
    let o = run(&case("gguf", "estimate --model m.gguf", "").file("m.gguf", gguf[..cut].to_vec()));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains(&format!("{line}: priced from its header")), "{}", o.stdout);
    // The same weights as the whole file's.
    let whole = run(&case("gguf", "estimate --model m.gguf", "").file("m.gguf", gguf.clone()));
    let need = |s: &str| s.lines().find(|l| l.starts_with("q4_k_m: needs")).map(str::to_string);
    assert!(need(&o.stdout).is_some() && need(&o.stdout) == need(&whole.stdout), "{}\n{}", o.stdout, whole.stdout);
}
