//! The parsers under a bounded fuzzing run: a valid tiny safetensors model and a valid tiny GGUF,
//! each mutated (cut anywhere, bytes overwritten, lengths and counts replaced by huge values),
//! opened as the lab opens a user's model and every tensor loaded. None may panic, and none may
//! allocate more than a small multiple of the file's size (the counting allocator measures it):
//! a length field of 2^62 must be refused, not believed. `fuzz/` holds the cargo-fuzz targets
//! for longer runs (fuzz/README.md).

mod common;

use candle_core::Device;
use proptest::prelude::*;
use std::path::Path;
use vram_lab::memory::host::{self, CountingAlloc};
use vram_lab::model::source::{self, SourceOptions};
use vram_lab::model::{ModelSource, Precision};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// One change to a file's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Cut(usize),
    Byte(usize, u8),
    /// A little-endian u64 written at a position: a length, a count, an offset.
    Word(usize, u64),
}

fn mutation(len: usize, header: usize) -> impl Strategy<Value = Mutation> {
    // Most changes land in the header, where the lengths and counts are.
    let at = prop_oneof![3 => 0..header.max(1), 1 => 0..len];
    let huge =
        prop_oneof![Just(u64::MAX), Just(1u64 << 62), Just(1u64 << 32), Just(len as u64 + 1), Just(0u64), any::<u64>()];
    prop_oneof![
        (0..len).prop_map(Mutation::Cut),
        (at.clone(), any::<u8>()).prop_map(|(p, b)| Mutation::Byte(p, b)),
        (at, huge).prop_map(|(p, w)| Mutation::Word(p, w)),
    ]
}

fn apply(mut bytes: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        match *m {
            Mutation::Cut(n) => bytes.truncate(n),
            Mutation::Byte(p, b) if p < bytes.len() => bytes[p] = b,
            Mutation::Word(p, w) if p + 8 <= bytes.len() => bytes[p..p + 8].copy_from_slice(&w.to_le_bytes()),
            _ => {}
        }
    }
    bytes
}

/// The allocation count is process-wide: one test measures at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Opens `source` and loads every tensor on the CPU; returns the most bytes allocated at once
/// above what was live before.
fn open_and_load(source: &ModelSource) -> u64 {
    let before = host::allocated();
    host::reset_peak();
    if let Ok(mut opened) = source::open(source, &SourceOptions::default()) {
        for spec in opened.cfg.tensor_specs() {
            if opened.weights.load(&spec, Precision::F32, &Device::Cpu).is_err() {
                break;
            }
        }
    }
    host::peak().saturating_sub(before)
}

/// A fixed seed keeps CI's runs the same; `VRAM_LAB_FUZZ_SEED` and `VRAM_LAB_FUZZ_CASES` explore
/// further (`VRAM_LAB_FUZZ_SEED=$RANDOM VRAM_LAB_FUZZ_CASES=5000 cargo test --test parsers_fuzz`).
fn config() -> ProptestConfig {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    ProptestConfig {
        cases: env("VRAM_LAB_FUZZ_CASES").unwrap_or(96) as u32,
        rng_seed: proptest::test_runner::RngSeed::Fixed(env("VRAM_LAB_FUZZ_SEED").unwrap_or(2026)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What a load of a file of `len` bytes may allocate: every tensor as F32 (a Q4 block of 144 B
/// holds 256 values: 7.1× as F32), the config and the names, and a margin.
fn allowed(len: usize) -> u64 {
    8 * len as u64 + (16 << 20)
}

fn tiny_safetensors(dir: &Path) -> Vec<u8> {
    common::write_dir(dir, &common::tiny(), 11, candle_core::DType::F32, 1);
    std::fs::read(dir.join("model.safetensors")).unwrap()
}

fn tiny_gguf(dir: &Path) -> Vec<u8> {
    let path = dir.join("tiny.gguf");
    let o = common::lab_quiet(&["quantize", "--model", "synthetic:tiny", "--to", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    std::fs::read(path).unwrap()
}

#[test]
fn mutated_safetensors_never_panic_or_overallocate() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let valid = tiny_safetensors(tmp.path());
    let header = 8 + u64::from_le_bytes(valid[..8].try_into().unwrap()) as usize;
    let source = ModelSource::Dir(tmp.path().to_path_buf());
    proptest!(config(), |(ms in prop::collection::vec(mutation(valid.len(), header), 1..4))| {
        let bytes = apply(valid.clone(), &ms);
        std::fs::write(tmp.path().join("model.safetensors"), &bytes).unwrap();
        let peak = open_and_load(&source);
        prop_assert!(peak <= allowed(valid.len()), "{:?}: {} B allocated for a {} B file", ms, peak, bytes.len());
    });
}

#[test]
fn mutated_gguf_never_panics_or_overallocates() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let valid = tiny_gguf(tmp.path());
    // The metadata and tensor infos: everything before the first tensor's data (~ the first few KiB).
    let header = valid.len().min(16 << 10);
    let path = tmp.path().join("m.gguf");
    let source = ModelSource::Gguf(path.clone());
    proptest!(config(), |(ms in prop::collection::vec(mutation(valid.len(), header), 1..4))| {
        let bytes = apply(valid.clone(), &ms);
        std::fs::write(&path, &bytes).unwrap();
        let peak = open_and_load(&source);
        prop_assert!(peak <= allowed(valid.len()), "{:?}: {} B allocated for a {} B file", ms, peak, bytes.len());
    });
}

/// The headers the Hub sizing reads by Range requests, mutated: a GGUF file's first bytes (its
/// header, the file's length as the server gave it) and a safetensors header's JSON with shapes
/// replaced by any numbers, priced as `estimate --model org/x:file` prices them. None may panic
/// (an overflowing size is refused), nor allocate past a small multiple of the bytes.
#[test]
fn mutated_hub_headers_never_panic_or_overallocate() {
    use vram_lab::model::gguf::{header::Header, Gguf};
    use vram_lab::model::load::hub::headers::parse_safetensors_header;
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf(tmp.path());
    let prefix = gguf[..gguf.len().min(16 << 10)].to_vec();
    let st = tiny_safetensors(tmp.path());
    let json: serde_json::Value =
        serde_json::from_slice(&st[8..8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize]).unwrap();
    let names: Vec<String> = json.as_object().unwrap().keys().filter(|k| *k != "__metadata__").cloned().collect();
    let shape = prop::collection::vec(prop_oneof![Just(u64::MAX), Just(1u64 << 32), 0..4096u64, any::<u64>()], 0..5);
    let file_len = prop_oneof![Just(gguf.len() as u64), Just(u64::MAX), Just(0u64), any::<u64>()];
    proptest!(config(), |(ms in prop::collection::vec(mutation(prefix.len(), prefix.len()), 1..4), len in file_len,
                           which in 0..names.len(), dims in shape)| {
        let before = host::allocated();
        host::reset_peak();
        if let Ok(Some(h)) = Header::from_prefix(&apply(prefix.clone(), &ms), len, Path::new("m.gguf")) {
            let _ = (h.tensor_bytes(), h.bytes_by_type());
            if let Ok(g) = Gguf::from_header(h) {
                if let Ok(cfg) = g.config() {
                    let _ = (g.loaded_bytes(&cfg, Precision::Q4), g.loaded_bytes(&cfg, Precision::F32));
                }
            }
        }
        let mut j = json.clone();
        j[&names[which]]["shape"] = dims.clone().into();
        if let Ok(h) = parse_safetensors_header("m.safetensors", &serde_json::to_vec(&j).unwrap()) {
            let _ = h.params();
        }
        let peak = host::peak().saturating_sub(before);
        prop_assert!(peak <= allowed(prefix.len() + st.len()), "{:?} {:?}: {} B allocated", ms, dims, peak);
    });
}

/// What a results folder may hold against `check`'s walker.
#[derive(Debug, Clone)]
enum Entry {
    Dir,
    File,
    Fifo,
    /// A link to `.`, `..`, the folder above the results, /dev/zero, a file outside, a folder outside.
    Link(usize),
}

/// Any tree of folders, files, FIFOs and links named as `check` looks for them: the walk ends,
/// returns only regular files inside the folder, and `check`'s readers end on it.
#[test]
fn a_walk_of_any_results_tree_ends_inside_it() {
    let names = ["kv_prefill.csv", "kv_batch.csv", "run.jsonl", "env.json", "sub", "llama.log"];
    let entry = prop_oneof![Just(Entry::Dir), Just(Entry::File), Just(Entry::Fifo), (0..6usize).prop_map(Entry::Link)];
    proptest!(config(), |(entries in prop::collection::vec((prop::collection::vec(0..names.len(), 1..4), entry), 1..20))| {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("results"), tmp.path().join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("kv_prefill.csv"), "OUTSIDE").unwrap();
        for (parts, e) in &entries {
            let path = parts.iter().fold(root.clone(), |p, &i| p.join(names[i]));
            if path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_err()) || path.symlink_metadata().is_ok() {
                continue;
            }
            match e {
                Entry::Dir => std::fs::create_dir(&path).unwrap(),
                Entry::File => std::fs::write(&path, "seq,batch,outcome\n1,1,ok\n").unwrap(),
                Entry::Fifo => {
                    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
                Entry::Link(k) => {
                    let target = [".".into(), "..".into(), tmp.path().to_path_buf(), "/dev/zero".into(),
                                  outside.join("kv_prefill.csv"), outside.clone()][*k].clone();
                    std::os::unix::fs::symlink(target, &path).unwrap();
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let walked = root.clone();
        std::thread::spawn(move || {
            let files = vram_lab::paths::walk_files(&walked, |_| true);
            let _ = vram_lab::experiments::check::steps(&walked);
            let _ = vram_lab::experiments::check::transformers::sweeps(&walked);
            let _ = vram_lab::experiments::check::llamacpp::launches(&walked);
            let _ = tx.send(files);
        });
        let files = rx.recv_timeout(std::time::Duration::from_secs(60));
        prop_assert!(files.is_ok(), "{:?}: the walk or a reader did not end in 60 s", entries);
        for f in files.unwrap() {
            let meta = f.symlink_metadata().unwrap();
            prop_assert!(f.starts_with(&root) && meta.is_file(), "{:?}: {} walked", entries, f.display());
            prop_assert!(f.canonicalize().unwrap().starts_with(root.canonicalize().unwrap()), "{}", f.display());
        }
    });
}
