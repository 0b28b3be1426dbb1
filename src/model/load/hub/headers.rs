//! Sizing a Hub model from its headers alone, as gguf-parser and hf-mem do: a GGUF file's header
//! read by Range requests that grow until it ends, a safetensors shard's header (its 8-byte
//! length, then that many bytes of JSON); the tensors are never fetched. A file already in the
//! cache is read there.

use crate::error::{LabError, Result};
use crate::model::gguf::header::Header;
use crate::model::load::hub::http::Fail;
use crate::model::load::hub::verify::header_len;
use crate::model::load::hub::{names, Run};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The first Range request of a GGUF header; each next one asks for as much again.
const FIRST_GGUF_BYTES: u64 = 1 << 20;
/// A GGUF header larger than this is refused (a 150k-token vocabulary takes a few MiB).
pub const MAX_GGUF_HEADER: u64 = 256 << 20;
/// One Range request may take this long.
const RANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the headers cost: the bytes fetched, and the files' whole size where the answers gave it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
    pub of: u64,
}

/// The most values one tensor of a header may hold: it keeps every sum of a header's tensors
/// inside u128 and every size derived from one inside u64.
const MAX_VALUES: u128 = 1 << 50;

/// One safetensors file's tensors as its header lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardHeader {
    /// (name, dtype, shape) of each tensor.
    pub tensors: Vec<(String, String, Vec<u64>)>,
}

impl ShardHeader {
    pub fn params(&self) -> u128 {
        self.tensors.iter().map(|(_, _, s)| s.iter().map(|&d| d as u128).product::<u128>()).sum()
    }
}

impl Run {
    /// `len` bytes of `file` from `start`, by a Range request.
    fn range(&self, file: &str, start: u64, len: u64) -> Result<(Vec<u8>, Option<u64>)> {
        self.client.range(&self.repo, file, start, len, RANGE_TIMEOUT).map_err(|f| self.fail(file, f))
    }

    /// The file in the cache, if the run's snapshot (or main's) has it.
    fn cached_file(&self, file: &str) -> Option<PathBuf> {
        let rel = names::file("the file name", file).ok()?;
        let commit = self.commit.clone().or_else(|| self.cache.main_ref())?;
        self.cache.cached(&commit, &rel)
    }

    /// A GGUF file's header: from the cache where the file is there, else by Range requests
    /// growing from 1 MiB until the header ends (at most `MAX_GGUF_HEADER`).
    fn gguf_header(&self, file: &str) -> Result<(Header, Fetched)> {
        let shown = Path::new(file);
        if let Some(path) = self.cached_file(file) {
            return Ok((Header::read(&path)?, Fetched::default()));
        }
        let (mut bytes, total) = self.range(file, 0, FIRST_GGUF_BYTES)?;
        loop {
            let have = bytes.len() as u64;
            if let Some(h) = Header::from_prefix(&bytes, total.unwrap_or(u64::MAX), shown)? {
                return Ok((h, Fetched { bytes: have, of: total.unwrap_or(0) }));
            }
            if have >= MAX_GGUF_HEADER {
                return Err(LabError::input(format!(
                    "hub: the header of {} in {} runs past {} MiB; the lab prices headers up to that",
                    file.escape_debug(),
                    self.at,
                    MAX_GGUF_HEADER >> 20
                )));
            }
            let (more, _) = self.range(file, have, have.min(MAX_GGUF_HEADER - have))?;
            if more.is_empty() {
                return Err(self.fail(file, Fail::Why(format!("the file ended after {have} bytes, inside its header"))));
            }
            bytes.extend(more);
        }
    }

    /// A safetensors file's header: its 8-byte length, then the JSON (at most 100 MB).
    fn safetensors_header(&self, file: &str) -> Result<(ShardHeader, Fetched)> {
        let (json, fetched) = match self.cached_file(file) {
            Some(path) => {
                let (_, len) = crate::paths::open_regular(&path, u64::MAX, true)?;
                let head = read_at(&path, 0, 8.min(len))?;
                let n = header_len(&head, file)?;
                (read_at(&path, 8, n)?, Fetched::default())
            }
            None => {
                let (head, total) = self.range(file, 0, 8)?;
                let n = header_len(&head, file)?;
                let (json, _) = self.range(file, 8, n)?;
                if json.len() as u64 != n {
                    return Err(self.fail(file, Fail::Why(format!("its header is {n} bytes, {} came", json.len()))));
                }
                (json, Fetched { bytes: 8 + n, of: total.unwrap_or(0) })
            }
        };
        Ok((parse_safetensors_header(file, &json)?, fetched))
    }
}

fn read_at(path: &Path, start: u64, n: u64) -> Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let (mut f, _) = crate::paths::open_regular(path, u64::MAX, true)?;
    f.seek(SeekFrom::Start(start))?;
    let mut out = Vec::new();
    f.take(n).read_to_end(&mut out)?;
    Ok(out)
}

/// The tensors a safetensors header lists (`__metadata__` aside), each with its dtype and shape.
pub fn parse_safetensors_header(file: &str, json: &[u8]) -> Result<ShardHeader> {
    let bad = |why: String| LabError::input(format!("{}: not a safetensors header ({why})", file.escape_debug()));
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    let mut tensors = Vec::with_capacity(map.len());
    for (name, t) in map.iter().filter(|(k, _)| *k != "__metadata__") {
        let dtype = t.get("dtype").and_then(|d| d.as_str());
        let shape: Option<Vec<u64>> =
            t.get("shape").and_then(|s| s.as_array()).and_then(|s| s.iter().map(|d| d.as_u64()).collect());
        match (dtype, shape) {
            // A dtype is a short name (F32, BF16, F8_E4M3): anything else, an escape sequence
            // included, never reaches a table or the terminal.
            (Some(d), Some(_))
                if d.is_empty() || d.len() > 16 || !d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                return Err(bad(format!(
                    "tensor `{}` has the dtype `{}`, not a safetensors dtype",
                    name.escape_debug(),
                    d.escape_debug()
                )))
            }
            (Some(_), Some(s))
                if s.iter().try_fold(1u128, |a, &d| a.checked_mul(d as u128)).is_none_or(|n| n > MAX_VALUES) =>
            {
                return Err(bad(format!(
                    "tensor `{}` has the shape {s:?}, more than 2^50 values (no checkpoint holds a tensor near it)",
                    name.escape_debug()
                )))
            }
            (Some(d), Some(s)) => tensors.push((name.clone(), d.to_string(), s)),
            _ => return Err(bad(format!("tensor `{}` has no dtype or shape", name.escape_debug()))),
        }
    }
    Ok(ShardHeader { tensors })
}

/// The parts of a split GGUF (`name-00001-of-00003.gguf`): every part's name, in order; the file
/// itself when it is not one.
pub fn split_parts(file: &str) -> Vec<String> {
    let split = file.strip_suffix(".gguf").and_then(|stem| {
        let (rest, of) = stem.rsplit_once("-of-")?;
        let (base, _) = rest.rsplit_once('-')?;
        let n: usize = of.parse().ok().filter(|_| of.len() == 5)?;
        (1..=n.min(crate::model::load::hub::MAX_SHARDS))
            .map(|k| format!("{base}-{k:05}-of-{of}.gguf"))
            .collect::<Vec<_>>()
            .into()
    });
    split.unwrap_or_else(|| vec![file.to_string()])
}

/// A GGUF file of `repo` priced from its header (every part's, for a split file) without the
/// tensors: the header, and what the Range requests fetched.
pub fn gguf_header_from_hub(repo: &str, file: &str, cache_dir: Option<&Path>) -> Result<(Header, Fetched)> {
    let run = Run::new(repo, cache_dir)?;
    names::file("the file name", file)?;
    let mut total = Fetched::default();
    let mut merged: Option<Header> = None;
    for part in split_parts(file) {
        let (h, f) = run.gguf_header(&part)?;
        total.bytes += f.bytes;
        total.of = total.of.saturating_add(f.of);
        match merged.as_mut() {
            None => merged = Some(h),
            Some(m) => m.absorb(h)?,
        }
    }
    merged.map(|h| (h, total)).ok_or_else(|| LabError::input(format!("hub: no GGUF file named {file}")))
}

/// A safetensors repo sized by its config.json (fetched into the cache) and each shard's header:
/// the config's path, the shards' tensors, what the Range requests fetched.
pub fn safetensors_headers_from_hub(
    repo: &str,
    cache_dir: Option<&Path>,
) -> Result<(PathBuf, Vec<ShardHeader>, Fetched)> {
    let mut run = Run::new(repo, cache_dir)?;
    let config = run.fetch("config.json")?;
    let shards = match run.get(super::HUB_INDEX) {
        Ok(index) => super::shards_of(&index, &run.at)?,
        Err(refused @ Fail::Refused(_)) => return Err(run.fail(super::HUB_INDEX, refused)),
        Err(_) => vec!["model.safetensors".to_string()],
    };
    let mut total = Fetched::default();
    let mut headers = Vec::with_capacity(shards.len());
    for shard in &shards {
        let (h, f) = run.safetensors_header(shard)?;
        total.bytes += f.bytes;
        total.of = total.of.saturating_add(f.of);
        headers.push(h);
    }
    Ok((config, headers, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names() {
        assert_eq!(
            split_parts("q-00002-of-00003.gguf"),
            vec!["q-00001-of-00003.gguf", "q-00002-of-00003.gguf", "q-00003-of-00003.gguf"]
        );
        assert_eq!(split_parts("model-q4_k_m.gguf"), vec!["model-q4_k_m.gguf"]);
        assert_eq!(split_parts("a-1-of-3.gguf"), vec!["a-1-of-3.gguf"]);
    }

    #[test]
    fn safetensors_headers_name_their_tensors() {
        let json = br#"{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]}}"#;
        let h = parse_safetensors_header("m.safetensors", json).unwrap();
        assert_eq!(h.tensors, vec![("w".to_string(), "BF16".to_string(), vec![4, 8])]);
        assert_eq!(h.params(), 32);
        assert!(parse_safetensors_header("m.safetensors", br#"{"w":{"dtype":"BF16"}}"#).is_err());
        // A dtype carrying an escape sequence is refused, and the refusal prints it escaped.
        let e = parse_safetensors_header("m.safetensors", b"{\"w\":{\"dtype\":\"\\u001b[31mF32\",\"shape\":[1]}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a safetensors dtype") && !e.contains('\u{1b}'), "{e:?}");
        assert!(header_len(&0u64.to_le_bytes(), "m").is_err() && header_len(&[1, 2], "m").is_err());
    }

    #[test]
    fn shapes_past_any_checkpoint_are_refused() {
        let of = |shape: &str| {
            parse_safetensors_header("m", format!(r#"{{"w":{{"dtype":"F32","shape":{shape}}}}}"#).as_bytes())
        };
        // A product past u128 (it panicked in a debug build), and one inside u128 but past 2^50.
        for shape in ["[18446744073709551615,18446744073709551615,18446744073709551615]", "[1073741824,2097152]"] {
            let e = of(shape).unwrap_err().to_string();
            assert!(e.contains("more than 2^50 values"), "{shape}: {e}");
        }
        assert_eq!(of("[1073741824,1048576]").unwrap().params(), 1 << 50);
    }
}
