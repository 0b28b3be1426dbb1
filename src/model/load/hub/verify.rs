//! Whether a file of the cache is whole, checked before a download is kept and each time the
//! cache serves it: JSON that parses, a safetensors file whose tensors end where the file ends,
//! the size the Hub announces (`X-Linked-Size`) and the sha256 its ETag names for LFS files. A
//! short body, a cut chunked body or an HTML page answered 200 fails here and is never linked.

use crate::error::{LabError, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// safetensors' own ceiling on a header (`safetensors::tensor::MAX_HEADER_SIZE`).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// An ETag that is a sha256 in hex: the Hub's ETag of an LFS file (the weights) is the sha256 of
/// its content; a git file's is a 40-hex git hash, which the lab does not recompute.
pub fn is_sha256(etag: &str) -> bool {
    etag.len() == 64 && etag.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The sha256 of a download as it streams, when its ETag names one.
pub struct Hasher(Option<Sha256>);

impl Hasher {
    pub fn for_etag(etag: &str) -> Self {
        Self(is_sha256(etag).then(Sha256::new))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        if let Some(h) = self.0.as_mut() {
            h.update(bytes);
        }
    }

    /// Why the bytes are not the ones `etag` names, or None (also when it names no sha256).
    pub fn mismatch(self, etag: &str) -> Option<String> {
        let got = format!("{:x}", self.0?.finalize());
        (got != etag).then(|| format!("its sha256 is {got}, not the {etag} its ETag names"))
    }
}

/// Why the file at `path`, fetched as `file`, is not whole, or None. Reads a JSON file (at most
/// `max_json` bytes) or a safetensors header; other files (GGUF) have only their size checked,
/// where the caller knows it.
pub fn damage(path: &Path, file: &str, max_json: u64) -> Option<String> {
    if file.ends_with(".json") {
        let bytes = match crate::paths::read_regular(path, max_json) {
            Ok(b) => b,
            Err(e) => return Some(e.to_string()),
        };
        return serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
            .err()
            .map(|e| format!("its {} bytes are not JSON ({e})", bytes.len()));
    }
    if file.ends_with(".safetensors") {
        return safetensors_damage(path, file).err();
    }
    None
}

/// A safetensors file is its header's length, the header, and the tensors' bytes up to the last
/// `data_offsets` end: a file of any other length was cut or is something else.
fn safetensors_damage(path: &Path, file: &str) -> Result<(), String> {
    let (f, len) = crate::paths::open_regular(path, u64::MAX, true).map_err(|e| e.to_string())?;
    let mut f = f.take(8 + MAX_SAFETENSORS_HEADER);
    let mut head = [0u8; 8];
    f.read_exact(&mut head).map_err(|_| format!("{len} bytes, shorter than a safetensors header's length"))?;
    let n = header_len(&head, file).map_err(|e| e.to_string())?;
    if 8 + n > len {
        return Err(format!("{len} bytes, shorter than its {n}-byte header"));
    }
    let mut json = vec![0u8; n as usize];
    f.read_exact(&mut json).map_err(|e| e.to_string())?;
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&json).map_err(|e| format!("its header is not JSON ({e})"))?;
    let end = map
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, t)| t.get("data_offsets")?.as_array()?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let want = 8 + n + end;
    if len != want {
        return Err(format!("{len} bytes where its header's tensors end at {want}"));
    }
    Ok(())
}

/// The length a safetensors file's first 8 bytes give its header, within safetensors' ceiling.
pub(super) fn header_len(head: &[u8], file: &str) -> Result<u64> {
    let bytes: [u8; 8] = head.try_into().map_err(|_| {
        LabError::input(format!(
            "{}: {} bytes, shorter than a safetensors header's length",
            file.escape_debug(),
            head.len()
        ))
    })?;
    let n = u64::from_le_bytes(bytes);
    if n == 0 || n > MAX_SAFETENSORS_HEADER {
        return Err(LabError::input(format!(
            "{}: a safetensors header of {n} bytes (safetensors reads 1 to {MAX_SAFETENSORS_HEADER})",
            file.escape_debug()
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_64_hex_is_a_sha256() {
        assert!(is_sha256(&"ab".repeat(32)));
        assert!(!is_sha256(&"AB".repeat(32)));
        assert!(!is_sha256(&"ab".repeat(20)));
        assert!(!is_sha256(&"zz".repeat(32)));
    }

    #[test]
    fn a_cut_safetensors_file_is_damaged_and_a_whole_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut whole = (header.len() as u64).to_le_bytes().to_vec();
        whole.extend_from_slice(header);
        whole.extend_from_slice(&[0u8; 8]);
        let p = dir.path().join("m.safetensors");
        std::fs::write(&p, &whole).unwrap();
        assert_eq!(damage(&p, "m.safetensors", 1 << 20), None);
        std::fs::write(&p, &whole[..whole.len() - 3]).unwrap();
        assert!(damage(&p, "m.safetensors", 1 << 20).unwrap().contains("where its header's tensors end at"));
        std::fs::write(&p, b"<!DOCTYPE html><html>rate limited</html>").unwrap();
        assert!(damage(&p, "m.safetensors", 1 << 20).is_some());
        let j = dir.path().join("config.json");
        std::fs::write(&j, b"<html>").unwrap();
        assert!(damage(&j, "config.json", 1 << 20).unwrap().contains("not JSON"));
    }

    #[test]
    fn the_hash_names_the_bytes() {
        let etag = format!("{:x}", Sha256::digest(b"weights"));
        let mut h = Hasher::for_etag(&etag);
        h.update(b"weights");
        assert_eq!(h.mismatch(&etag), None);
        let mut h = Hasher::for_etag(&etag);
        h.update(b"weightz");
        assert!(h.mismatch(&etag).unwrap().contains("not the"));
    }
}
