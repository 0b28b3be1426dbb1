//! The hostile inputs, by where they come from: the command line, config.json, model folders
//! (safetensors, GGUF, tokenizers), the Hub's names, run folders given to `report`, and the files
//! the lab writes (`--out`, `quantize --to`, `watch --csv`). Each is one `Case` (harness.rs).

use super::common;
use super::harness::{case, Case, VICTIM};
use std::path::Path;

pub fn tiny_json() -> serde_json::Value {
    serde_json::to_value(common::tiny()).unwrap()
}

/// tiny's config.json with `key` set to `value`.
pub fn config_with(key: &str, value: serde_json::Value) -> Vec<u8> {
    let mut v = tiny_json();
    v[key] = value;
    serde_json::to_vec_pretty(&v).unwrap()
}

/// A valid tiny model directory (config.json + one F32 safetensors), as files.
pub fn model_dir(name: &str) -> Vec<(String, Vec<u8>)> {
    let tmp = tempfile::tempdir().unwrap();
    common::write_dir(tmp.path(), &common::tiny(), 7, candle_core::DType::F32, 1);
    ["config.json", "model.safetensors"]
        .iter()
        .map(|f| (format!("{name}/{f}"), std::fs::read(tmp.path().join(f)).unwrap()))
        .collect()
}

/// `files` with the one named `path` replaced by `f(bytes)`.
pub fn with(
    mut files: Vec<(String, Vec<u8>)>,
    path: &str,
    f: impl FnOnce(Vec<u8>) -> Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    let i = files.iter().position(|(p, _)| p == path).unwrap();
    let bytes = std::mem::take(&mut files[i].1);
    files[i].1 = f(bytes);
    files
}

/// A safetensors file's JSON header and data, split.
pub fn split_safetensors(bytes: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), bytes[8 + n..].to_vec())
}

pub fn join_safetensors(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let h = serde_json::to_vec(header).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

/// The tiny model's safetensors with `f` applied to its header.
pub fn edit_header(f: impl Fn(&mut serde_json::Value)) -> impl FnOnce(Vec<u8>) -> Vec<u8> {
    move |bytes| {
        let (mut h, data) = split_safetensors(&bytes);
        f(&mut h);
        join_safetensors(&h, &data)
    }
}

/// A Q4 GGUF of the tiny model, written once by the lab itself.
pub fn tiny_gguf() -> Vec<u8> {
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

pub fn patched(mut bytes: Vec<u8>, at: usize, with: &[u8]) -> Vec<u8> {
    bytes[at..at + with.len()].copy_from_slice(with);
    bytes
}

/// The byte offset of a GGUF metadata string value `value` (its length prefix starts 8 before).
pub fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes.windows(needle.len()).position(|w| w == needle).unwrap()
}

fn original() -> Vec<Case> {
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
        // Finite in f64, infinite in llama.cpp's f32 sum of the shares.
        case("cli", "plan --cards 24GiB,24GiB --split 1e300,1e300", "finite positive f32"),
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
        case("config.json", "estimate --config missing.json", "missing.json"),
        case("config.json", "estimate --config c.json", "not a usable model config").file("c.json", ""),
        case("config.json", "estimate --config c.json", "not a usable model config").file("c.json", "{"),
        case("config.json", "estimate --config c.json", "not a usable model config").file("c.json", "[1, 2]"),
        case("config.json", "estimate --config c.json", "num_attention_heads")
            .file("c.json", config_with("hidden_size", 250.into())),
        case("config.json", "estimate --config c.json", "num_key_value_heads")
            .file("c.json", config_with("num_key_value_heads", 3.into())),
        case("config.json", "estimate --config c.json", "vocab_size must be positive")
            .file("c.json", config_with("vocab_size", 0.into())),
        case("config.json", "estimate --config c.json", "intermediate_size")
            .file("c.json", config_with("intermediate_size", 1_000_000_000_000_000u64.into())),
        case("config.json", "estimate --config c.json", "num_hidden_layers")
            .file("c.json", config_with("num_hidden_layers", 1_000_000_000_000u64.into())),
        case("config.json", "estimate --config c.json", "even").file("c.json", config_with("hidden_size", 12.into())),
        case("config.json", "estimate --config c.json", "int8")
            .file("c.json", config_with("torch_dtype", "int8".into())),
        case("config.json", "estimate --config c.json", "rms_norm_eps")
            .file("c.json", config_with("rms_norm_eps", (-1.0).into())),
        case("config.json", "estimate --config c.json", "hidden_size")
            .file("c.json", config_with("hidden_size", (-4).into())),
        case("config.json", "estimate --config c.json", "gelu")
            .file("c.json", config_with("hidden_act", "gelu".into())),
        case("config.json", "estimate --config c.json", "max_position_embeddings")
            .file("c.json", config_with("max_position_embeddings", 0.into())),
        case("config.json", "estimate --config c.json", "qwen2_moe")
            .file("c.json", config_with("model_type", "qwen2_moe".into())),
        case("config.json", "estimate --config c.json", "num_experts")
            .file("c.json", config_with("num_experts", 60.into())),
        // safetensors directories, through `generate --model m`.
        case("safetensors", gen_dir, "safetensors").file("m/config.json", serde_json::to_vec(&tiny_json()).unwrap()),
        case("safetensors", gen_dir, "model.safetensors").files(with(
            model_dir("m"),
            "m/model.safetensors",
            |_| vec![],
        )),
        case("safetensors", gen_dir, "model.safetensors")
            .files(with(model_dir("m"), "m/model.safetensors", |b| patched(b, 0, &u64::MAX.to_le_bytes()))),
        case("safetensors", gen_dir, "model.safetensors")
            .files(with(model_dir("m"), "m/model.safetensors", |b| patched(b, 8, b"!!!!"))),
        case("safetensors", gen_dir, "model.safetensors")
            .files(with(model_dir("m"), "m/model.safetensors", |b| b[..b.len() / 2].to_vec())),
        case("safetensors", gen_dir, "lm_head.weight").files(with(
            model_dir("m"),
            "m/model.safetensors",
            edit_header(|h| h["lm_head.weight"]["dtype"] = "I32".into()),
        )),
        case("safetensors", gen_dir, "model.norm.weight").files(with(
            model_dir("m"),
            "m/model.safetensors",
            edit_header(|h| h["model.norm.weight"]["shape"] = serde_json::json!([64, 4])),
        )),
        case("safetensors", gen_dir, "model.norm.weight").files(with(
            model_dir("m"),
            "m/model.safetensors",
            edit_header(|h| {
                let t = h.as_object_mut().unwrap().remove("model.norm.weight").unwrap();
                h["model.norm.weight_renamed"] = t;
            }),
        )),
        case("safetensors", gen_dir, "missing.safetensors").files(model_dir("m")).file(
            "m/model.safetensors.index.json",
            serde_json::to_vec(&serde_json::json!({"weight_map": {"lm_head.weight": "missing.safetensors"}})).unwrap(),
        ),
        // GGUF files, through `estimate` (the header) and `generate` (the tensors).
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", vec![]),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", patched(gguf.clone(), 0, b"GGML")),
        case("gguf", "estimate --model m.gguf", "m.gguf").file("m.gguf", gguf[..64].to_vec()),
        case("gguf", gen_gguf, "truncated").file("m.gguf", gguf[..gguf.len() * 9 / 10].to_vec()),
        case("gguf", "estimate --model m.gguf", "m.gguf")
            .file("m.gguf", patched(gguf.clone(), 8, &(1u64 << 60).to_le_bytes())),
        case("gguf", "estimate --model m.gguf", "m.gguf")
            .file("m.gguf", patched(gguf.clone(), 24, &(1u64 << 62).to_le_bytes())),
        case("gguf", "estimate --model m.gguf", "architecture").file("m.gguf", {
            let at = find(&gguf, b"qwen2");
            patched(gguf.clone(), at, b"gemma")
        }),
        // A family the lab reads whose keys the file lacks: the missing key, named.
        case("gguf", "estimate --model m.gguf", "llama.attention.head_count").file("m.gguf", {
            let at = find(&gguf, b"qwen2");
            patched(gguf.clone(), at, b"llama")
        }),
        case("gguf", "estimate --model m.gguf", "m.gguf")
            .file("m.gguf", patched(gguf.clone(), 4, &99u32.to_le_bytes())),
        // Tokenizers, through `generate --tokenizer`.
        case("tokenizer", "generate --tokenizer missing.json --prompt hi", "missing.json"),
        case("tokenizer", "generate --tokenizer t.json --prompt hi", "t.json").file("t.json", "{"),
        case("tokenizer", "generate --tokenizer t.json --prompt hi", "t.json").file("t.json", r#"{"model": 5}"#),
        case(
            "tokenizer",
            "generate --model m --tokenizer t.json --prompt hello_world_tokens --max-new-tokens 2",
            "outside the vocabulary",
        )
        .files({
            let tmp = tempfile::tempdir().unwrap();
            common::write_dir(tmp.path(), &small_vocab, 7, candle_core::DType::F32, 1);
            ["config.json", "model.safetensors"]
                .iter()
                .map(|f| (format!("m/{f}"), std::fs::read(tmp.path().join(f)).unwrap()))
                .collect()
        })
        .file("t.json", tokenizer),
        // The hub: a server that is not there.
        case("hub", "estimate --model org/name --cache-dir out/hf", "org/name")
            .env("HF_ENDPOINT", "http://127.0.0.1:9"),
    ]
}

/// Every case: the original table, then the cases of the hardening (bounds, paths, files).
pub fn cases() -> Vec<Case> {
    let mut all = original();
    all.extend(bounds());
    all.extend(configs());
    all.extend(model_folders());
    all.extend(gguf_rules());
    all.extend(run_folders());
    all.extend(writes());
    all.extend(hub_names());
    all.extend(fuzz_finds());
    all.extend(flag_matrix());
    all
}

/// Hub names the user gives and HF_ENDPOINT, refused before any request (no server runs here;
/// the malicious server's cases are tests/hub_hostile.rs).
fn hub_names() -> Vec<Case> {
    let gen = |model: &str| format!("generate --prompt-ids 1,2 --max-new-tokens 2 --model {model}");
    let at = |endpoint: &str| case("hub", &gen("org/name"), "HF_ENDPOINT").env("HF_ENDPOINT", endpoint);
    vec![
        case("hub", &gen("org/name:../../x.gguf"), "climbs out"),
        case("hub", &gen("org/name:/etc/x.gguf"), "relative name"),
        case("hub", &gen("org/..:x.gguf"), "starting with"),
        case("hub", &gen("org/-x"), "starting with"),
        case("hub", &gen("org/x\u{1b}[2J"), "holds a character"),
        case("hub", &gen("org/x%2F..%2Fy"), "holds a character"),
        at("http://127.0.0.1:1/\u{7}"),
        at("javascript:alert(1)"),
        at("file:///etc"),
        at("127.0.0.1:8080"),
        at("http://user@127.0.0.1:1"),
    ]
}

/// A JSON value as file bytes.
fn json(v: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec_pretty(&v).unwrap()
}

/// A frag --pytorch file of one false-OOM record with `key` set to `value`.
fn frag_record(key: &str, value: serde_json::Value) -> Vec<u8> {
    let mut r = serde_json::json!({"experiment": "frag", "kind": "false_oom", "allocator": "pytorch", "layout": "fresh",
        "device_free_start": 24u64 << 30, "hole": 500u64 << 20, "request": 1u64 << 31, "outcome": "oom"});
    r[key] = value;
    format!("{r}\n").into_bytes()
}

/// Numbers no flag or file may take: the machine's memory, a card, a time.
fn bounds() -> Vec<Case> {
    vec![
        case("bounds", "watch --duration-s nan", "--duration-s"),
        case("bounds", "watch --duration-s inf", "--duration-s"),
        case("bounds", "watch --duration-s=-1", "--duration-s"),
        case("bounds", "watch --duration-s 1e300", "--duration-s"),
        case("bounds", "watch --duration-s 1 --interval-ms 18446744073709551615", "--interval-ms"),
        case("bounds", "watch --duration-s 1 --interval-ms 0", "--interval-ms"),
        case("bounds", "watch --duration-s 1 --interval-ms 3600001", "--interval-ms"),
        case("bounds", "watch --duration-s 1 --threshold-mib nan", "--threshold-mib"),
        case("bounds", "plan --card 0.0000001MiB", "out of range"),
        case("bounds", "plan --card 0.000000001GiB", "out of range"),
        case("bounds", "plan --card 1e-300GiB", "unknown card"),
        case("bounds", "estimate --card 0.0001MiB", "out of range"),
        case("bounds", "offload --gpu-budget 0.0000001GiB", "out of range"),
        case("bounds", "estimate --precisions bf16,bf16", "twice"),
        case("bounds", "kv --precisions q4_k_m,q4_k_m", "twice"),
        case("bounds", "anatomy --precisions f32,f32", "twice"),
        case("bounds", "bench --precisions bf16,bf16", "twice"),
        case("bounds", "kv --sweeps prefill,prefill", "twice"),
        case("bounds", "frag --policies pool,pool", "twice"),
        case("bounds", "leaks --demos kv,kv", "twice"),
        case("bounds", "train --checkpointing true,true", "twice"),
        case("bounds", "train --gpus 2 --seq 16777216 --batch 65536", "too large to price"),
        case("bounds", "train --seq 16777216 --batch 65536", "too large to price"),
        case("bounds", "train --gpus 2 --seq 65536 --batch 64", "more than the"),
        case("bounds", "frag --card 65536GiB --policies pool", "more than 10000"),
        case("bounds", "frag --pytorch p.jsonl", "hole").file("p.jsonl", frag_record("hole", 0.into())),
        case("bounds", "frag --pytorch p.jsonl", "device_free_start")
            .file("p.jsonl", frag_record("device_free_start", u64::MAX.into())),
        case("bounds", "frag --pytorch p.jsonl", "request").file("p.jsonl", frag_record("request", 0.into())),
        case("bounds", "frag --pytorch p.jsonl", "request").file("p.jsonl", frag_record("request", "many".into())),
        case("bounds", "frag --pytorch p.jsonl", "more than 10000").file("p.jsonl", frag_record("hole", 1.into())),
        case("bounds", "frag --pytorch p.jsonl", "not a regular file").fifo("p.jsonl"),
        case("bounds", "frag --pytorch /dev/zero", "not a regular file"),
    ]
}

/// config.json fields the lab does not implement, refused by name; sizes that overflow.
fn configs() -> Vec<Case> {
    let est = "estimate --config c.json";
    let cfg = |key: &str, v: serde_json::Value| config_with(key, v);
    let mut head_dim = tiny_json();
    head_dim["head_dim"] = (1u64 << 62).into();
    let mut padded = tiny_json().to_string().into_bytes();
    padded.extend(std::iter::repeat_n(b' ', 17 << 20));
    vec![
        case("config.json", est, "rope_scaling").file(
            "c.json",
            cfg(
                "rope_scaling",
                serde_json::json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
            ),
        ),
        case("config.json", est, "rope_scaling")
            .file("c.json", cfg("rope_scaling", serde_json::json!({"rope_type": "llama3", "factor": 8.0}))),
        case("config.json", est, "rope_scaling")
            .file("c.json", cfg("rope_scaling", serde_json::json!({"type": "linear", "factor": 2.0}))),
        case("config.json", est, "rope_parameters").file(
            "c.json",
            cfg("rope_parameters", serde_json::json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6})),
        ),
        case("config.json", est, "use_sliding_window").file("c.json", cfg("use_sliding_window", true.into())),
        case("config.json", est, "layer_types")
            .file("c.json", cfg("layer_types", serde_json::json!(["sliding_attention", "full_attention"]))),
        case("config.json", est, "partial_rotary_factor").file("c.json", cfg("partial_rotary_factor", 0.5.into())),
        // Qwen2 biases q, k and v whatever the field says; Llama with a bias is not implemented.
        case("config.json", est, "attention_bias").file("c.json", {
            let mut v = tiny_json();
            v["model_type"] = "llama".into();
            v["attention_bias"] = true.into();
            json(v)
        }),
        case("config.json", est, "quantization_config")
            .file("c.json", cfg("quantization_config", serde_json::json!({"quant_method": "awq", "bits": 4}))),
        case("config.json", est, "use_mrope").file("c.json", cfg("use_mrope", true.into())),
        case("config.json", est, "head_dim").file("c.json", json(head_dim)),
        case("config.json", est, "head_dim").file("c.json", cfg("head_dim", 3.into())),
        case("config.json", est, "text_config").file("c.json", cfg("model_type", "gemma3".into())),
        // gpt-oss: what llama.cpp's graph does not do is refused by name; the lab's own engine
        // points to llama.cpp's.
        case("config.json", est, "swiglu_limit").file("c.json", {
            let mut v: serde_json::Value =
                serde_json::from_str(include_str!("../../data/models/gpt-oss-20b.json")).unwrap();
            v["swiglu_limit"] = 8.0.into();
            json(v)
        }),
        case("config.json", est, "--engine llama.cpp")
            .file("c.json", json(serde_json::from_str(include_str!("../../data/models/gpt-oss-20b.json")).unwrap())),
        case("config.json", est, "more than").file("c.json", padded),
        case("config.json", est, "not a regular file").fifo("c.json"),
        case("config.json", "estimate --config /dev/zero", "not a regular file"),
        case("config.json", est, "not a usable model config").link("c.json", VICTIM),
    ]
}

/// A model folder whose files point outside it, are not files, or hold NaN.
fn model_folders() -> Vec<Case> {
    let gen = "generate --model m --prompt-ids 1,2 --max-new-tokens 2";
    let index = |shard: serde_json::Value| {
        json(serde_json::json!({"weight_map": {"lm_head.weight": shard, "model.norm.weight": "model.safetensors"}}))
    };
    // The tiny model's F32 safetensors with one value of `tensor` set to `v`.
    let poisoned = |tensor: &'static str, at: usize, v: f32| {
        with(model_dir("m"), "m/model.safetensors", move |b| {
            let (h, _) = split_safetensors(&b);
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let start = 8 + n + h[tensor]["data_offsets"][0].as_u64().unwrap() as usize + 4 * at;
            patched(b, start, &v.to_le_bytes())
        })
    };
    let hidden = common::tiny().hidden_size;
    vec![
        case("model folder", gen, "climbs out")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index("../../../victim.txt".into())),
        case("model folder", gen, "relative name")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index("/etc/passwd".into())),
        case("model folder", gen, "relative name")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index("..\\victim.txt".into())),
        case("model folder", gen, "empty")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index("".into())),
        case("model folder", gen, "not a file name")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index(5.into())),
        case("model folder", gen, "not a regular file").files(model_dir("m")).fifo("m/model.safetensors.index.json"),
        case("model folder", gen, "more than")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", vec![b' '; 65 << 20]),
        case("model folder", gen, "not a regular file")
            .files(model_dir("m"))
            .file("m/model.safetensors.index.json", index("z.safetensors".into()))
            .link("m/z.safetensors", "/dev/zero"),
        case("model folder", gen, "not a regular file")
            .file("m/config.json", json(tiny_json()))
            .fifo("m/model.safetensors"),
        case("model folder", gen, "has no config.json")
            .files(model_dir("m").into_iter().filter(|(p, _)| p != "m/config.json").collect())
            .fifo("m/config.json"),
        case(
            "model folder",
            "generate --model m --tokenizer t.json --prompt hi --max-new-tokens 2",
            "not a regular file",
        )
        .files(model_dir("m"))
        .fifo("t.json"),
        case("model folder", gen, "model.norm.weight holds NaN").files(poisoned("model.norm.weight", 3, f32::NAN)),
        case("model folder", gen, "model.embed_tokens.weight holds NaN").files(poisoned(
            "model.embed_tokens.weight",
            hidden + 5,
            f32::INFINITY,
        )),
        case("model folder", gen, "lm_head.weight holds NaN").files(poisoned("lm_head.weight", 17, f32::NAN)),
        case("model folder", gen, "model.layers.0.mlp.down_proj.weight holds NaN").files(poisoned(
            "model.layers.0.mlp.down_proj.weight",
            0,
            f32::NEG_INFINITY,
        )),
    ]
}

/// Where the GGUF header gives `tensor`'s offset field (the name found with its length before
/// it: `output.weight` alone is found inside `blk.0.attn_output.weight`).
fn gguf_offset_field(bytes: &[u8], tensor: &str) -> usize {
    let named = [&(tensor.len() as u64).to_le_bytes()[..], tensor.as_bytes()].concat();
    let at = find(bytes, &named) + named.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    at + 4 + 8 * dims + 4
}

/// The name of the tensor whose data comes last.
fn gguf_last_tensor(bytes: &[u8]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    std::fs::write(&path, bytes).unwrap();
    let h = vram_lab::model::gguf::header::Header::read(&path).unwrap();
    h.tensors.iter().max_by_key(|t| t.offset).unwrap().name.clone()
}

/// Where `tensor`'s data starts in a GGUF file, as the lab's header reader finds it.
fn gguf_data_at(bytes: &[u8], tensor: &str) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    std::fs::write(&path, bytes).unwrap();
    let h = vram_lab::model::gguf::header::Header::read(&path).unwrap();
    (h.data_offset + h.tensor(tensor).unwrap().offset) as usize
}

/// ggml's own rules for a GGUF file, and weights that hold NaN.
fn gguf_rules() -> Vec<Case> {
    let gguf = tiny_gguf();
    let est = "estimate --model m.gguf";
    let gen = "generate --model m.gguf --prompt-ids 1,2 --max-new-tokens 2";
    let off = |t: &str, delta: u64| {
        let at = gguf_offset_field(&gguf, t);
        let v = u64::from_le_bytes(gguf[at..at + 8].try_into().unwrap()) + delta;
        patched(gguf.clone(), at, &v.to_le_bytes())
    };
    let renamed = {
        let at = find(&gguf, b"blk.1.attn_norm.weight");
        patched(gguf.clone(), at, b"blk.0.attn_norm.weight")
    };
    let nan_norm = patched(gguf.clone(), gguf_data_at(&gguf, "output_norm.weight") + 8, &f32::NAN.to_le_bytes());
    // The last tensor's rows made 2^60: its data ends past any file (2^67 bytes and more), where
    // no later offset shows it.
    let huge = |rows: u64| {
        let last = gguf_last_tensor(&gguf);
        patched(gguf.clone(), gguf_offset_field(&gguf, &last) - 4 - 8, &rows.to_le_bytes())
    };
    vec![
        case("gguf", est, "not a multiple of the alignment").file("m.gguf", off("blk.1.attn_norm.weight", 1)),
        case("gguf", est, "where ggml expects").file("m.gguf", off("blk.1.attn_norm.weight", 32)),
        case("gguf", est, "where ggml expects").file("m.gguf", off("token_embd.weight", 64)),
        case("gguf", est, "named twice").file("m.gguf", renamed),
        case("gguf", gen, "model.norm.weight holds NaN").file("m.gguf", nan_norm),
        case("gguf", est, "past 1 PiB").file("m.gguf", huge(1 << 60)),
        case("gguf", est, "past 1 PiB").file("m.gguf", huge(u64::MAX)),
        case("gguf", est, "no such GGUF file").fifo("m.gguf"),
        case("gguf", est, "no such GGUF file").link("m.gguf", "/dev/zero"),
    ]
}

/// A run folder the lab wrote (`estimate` of the tiny model), as files under `r/`.
fn run_folder() -> Vec<(String, Vec<u8>)> {
    static RUN: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        let o = common::lab_quiet(&["estimate", "--model", "synthetic:tiny", "--out", dir.to_str().unwrap()]);
        assert!(o.status.success(), "{}", common::output_text(&o));
        super::harness::snapshot(&dir, None)
            .into_iter()
            .filter(|(_, seen)| matches!(seen, super::harness::Seen::File(..)))
            .map(|(p, _)| (format!("r/{}", p.display()), std::fs::read(dir.join(&p)).unwrap()))
            .collect()
    })
    .clone()
}

/// The run folder with its manifest edited by `f`.
fn manifest_with(f: impl FnOnce(&mut serde_json::Value)) -> Vec<(String, Vec<u8>)> {
    with(run_folder(), "r/manifest.json", |b| {
        let mut m: serde_json::Value = serde_json::from_slice(&b).unwrap();
        f(&mut m);
        json(m)
    })
}

/// A text of the first stage named `name`, at `rel` in the folder.
fn text_at(rel: &str) -> Vec<(String, Vec<u8>)> {
    let rel = rel.to_string();
    manifest_with(move |m| m["stages"][0]["texts"] = serde_json::json!({"notes.txt": rel}))
}

/// `vram-lab report DIR`: a run folder's manifest is data, and its files the lab's own.
fn run_folders() -> Vec<Case> {
    let rep = "report r";
    // Every table of the first stage at `rel`: the report reads the ones its views show.
    let table_at = |rel: &str| {
        let rel = rel.to_string();
        manifest_with(move |m| {
            for (_, path) in m["stages"][0]["tables"].as_object_mut().unwrap().iter_mut() {
                *path = rel.clone().into();
            }
        })
    };
    vec![
        case("run folder", rep, "relative name").files(text_at("/etc/passwd")),
        case("run folder", rep, "climbs out").files(text_at("../victim.txt")),
        case("run folder", rep, "climbs out").files(text_at("estimate/../../victim.txt")),
        case("run folder", rep, "not a regular file").files(text_at("notes.txt")).fifo("r/notes.txt"),
        case("run folder", rep, "symbolic link").files(text_at("notes.txt")).link("r/notes.txt", "../victim.txt"),
        case("run folder", rep, "more than").files(text_at("notes.txt")).file("r/notes.txt", vec![b'x'; 17 << 20]),
        // One text named over and over, one stage recorded over and over: the report would embed
        // them as often.
        case("run folder", rep, "twice").files(manifest_with(|m| {
            let texts: serde_json::Map<String, serde_json::Value> =
                (0..100).map(|i| (format!("t{i}"), "notes.txt".into())).collect();
            m["stages"][0]["texts"] = texts.into();
        })),
        // Five texts of 15 MiB, each under the cap on one file, 75 MiB together.
        case("run folder", rep, "add up past 64 MiB")
            .files(manifest_with(|m| {
                let texts: serde_json::Map<String, serde_json::Value> =
                    (0..5).map(|i| (format!("t{i}"), format!("t{i}.txt").into())).collect();
                m["stages"][0]["texts"] = texts.into();
            }))
            .files((0..5).map(|i| (format!("r/t{i}.txt"), vec![b'x'; 15 << 20])).collect()),
        case("run folder", rep, "more than the 64").files(manifest_with(|m| {
            let first = m["stages"][0].clone();
            m["stages"] = vec![first; 1000].into();
        })),
        case("run folder", rep, "recorded twice").files(manifest_with(|m| {
            let first = m["stages"][0].clone();
            m["stages"] = vec![first; 10].into();
        })),
        case("cli", "run --stages anatomy,anatomy", "twice"),
        // A folder of the run that is a link: what lies beyond it is not the run's.
        case("run folder", rep, "not a folder")
            .files(text_at("sub/notes.txt"))
            .file("elsewhere/notes.txt", "outside the run")
            .link("r/sub", "../elsewhere"),
        case("run folder", rep, "character").files(text_at("notes\u{1b}[31m.txt")),
        case("run folder", rep, "climbs out").files(table_at("../../victim.txt")),
        case("run folder", rep, "relative name").files(table_at("/etc/passwd")),
        case("run folder", rep, "not a regular file").files(table_at("t.csv")).link("r/t.csv", "../victim.txt"),
        case("run folder", rep, "not a regular file").files(run_folder()).link("r/report.html", "../victim.txt"),
        case("run folder", rep, "not a regular file").files(run_folder()).fifo("r/report.html"),
        case("run folder", rep, "not a regular file")
            .files(with(run_folder(), "r/manifest.json", |_| vec![]))
            .fifo("r/manifest.json"),
        case("run folder", rep, "symbolic link")
            .files(with(run_folder(), "r/manifest.json", |_| vec![]))
            .link("r/manifest.json", "../victim.txt"),
        case("run folder", rep, "more than").files(with(run_folder(), "r/manifest.json", |_| vec![b' '; 17 << 20])),
        case("run folder", rep, "manifest.json")
            .files(with(run_folder(), "r/manifest.json", |_| b"{not json".to_vec())),
        case("run folder", "report elsewhere", "not a vram-lab run folder")
            .file("elsewhere/notes.txt", "the user's notes"),
    ]
}

/// Files the lab writes: never into a folder of the user's, through a link, or over a file.
fn writes() -> Vec<Case> {
    let q = "quantize --model synthetic:tiny --to";
    vec![
        case("writes", "estimate", "exists and is not empty").file("out/report.html", "the user's report"),
        case("writes", "estimate", "exists and is not empty")
            .file("out/console.txt", "the user's notes")
            .link("out/report.html", "../victim.txt"),
        case("writes", "estimate", "not a folder").file("elsewhere/keep.txt", "kept").link("out", "elsewhere"),
        case("writes", "estimate", "already holds a run")
            .files(run_folder().into_iter().map(|(p, b)| (p.replacen("r/", "out/", 1), b)).collect()),
        case("writes", &format!("{q} victim.txt"), "already exists"),
        case("writes", &format!("{q} /dev/null"), "already exists"),
        case("writes", &format!("{q} link.gguf"), "already exists").link("link.gguf", VICTIM),
        case("writes", &format!("{q} dangling.gguf"), "already exists").link("dangling.gguf", "nowhere/at/all"),
        case("writes", &format!("{q} q.gguf"), "cannot create").link("q.gguf.tmp", VICTIM),
        case("writes", "watch --duration-s 1 --csv victim.txt", "already exists"),
        case("writes", "watch --duration-s 1 --csv w.csv", "already exists").link("w.csv", VICTIM),
    ]
}

/// What libFuzzer found in the file parsers (fuzz/regressions/<target>), fixed: each find is a
/// case of its own, through the command that reads such a file.
fn fuzz_finds() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let finds = |target: &str| {
        let mut files: Vec<_> =
            std::fs::read_dir(dir.join(target)).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        files.sort();
        files.into_iter().map(|p| std::fs::read(p).unwrap()).collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for bytes in finds("gguf") {
        out.push(case("fuzz find", "estimate --model m.gguf", "m.gguf").file("m.gguf", bytes.clone()));
        out.push(
            case("fuzz find", "generate --model m.gguf --prompt-ids 1 --max-new-tokens 1", "m.gguf")
                .file("m.gguf", bytes),
        );
    }
    for bytes in finds("safetensors") {
        let cfg = std::fs::read(dir.join("../seeds/config/micro.json")).unwrap();
        out.push(
            case("fuzz find", "generate --model m --prompt-ids 1 --max-new-tokens 1", "model.safetensors")
                .file("m/config.json", cfg)
                .file("m/model.safetensors", bytes),
        );
    }
    for bytes in finds("config") {
        out.push(case("fuzz find", "estimate --config c.json", "c.json").file("c.json", bytes));
    }
    out
}

/// Every counted flag of the stages with the values no count takes: zero, a negative number,
/// NaN, and one past u64. `kv --resolution 0` means no bisection and runs (`tests/cli.rs`).
fn flag_matrix() -> Vec<Case> {
    let flags = [
        ("anatomy", "--max-new-tokens"),
        ("kv", "--max"),
        ("kv", "--max-batch"),
        ("kv", "--resolution"),
        ("offload", "--new-tokens"),
        ("bandwidth", "--copy-mib"),
        ("estimate", "--tp"),
        ("frag", "--hole-mib"),
        ("leaks", "--requests"),
        ("bench", "--new-tokens"),
        ("bench", "--repeats"),
        ("train", "--seq"),
        ("train", "--batch"),
        ("train", "--gpus"),
        ("parallel", "--gpus"),
        ("plan", "--seq"),
    ];
    let mut out = Vec::new();
    for (cmd, flag) in flags {
        for v in ["0", "-1", "nan", "18446744073709551616"] {
            if flag == "--resolution" && v == "0" {
                continue;
            }
            out.push(case("flags", &format!("{cmd} {flag}={v}"), flag));
        }
    }
    out
}
