//! Every name a Hub server, a mirror or a model folder gives, before it becomes a path or a URL:
//! the repo id, the commit and etag headers, file names, HF_ENDPOINT, a redirect's Location, and a
//! model.safetensors.index.json's shard names. The first byte picks which; what is accepted must
//! hold the rule it was checked for (no `..`, nothing absolute, no control character, http(s)).
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path};
use vram_lab::model::load::hub::names;
use vram_lab::model::load::weights::Safetensors;

fn plain(p: &Path) -> bool {
    p.components().all(|c| matches!(c, Component::Normal(_)))
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    let Ok(s) = std::str::from_utf8(rest) else { return };
    match kind % 7 {
        0 => {
            if names::repo_id(s).is_ok() {
                let folder = names::repo_folder(s);
                assert!(plain(Path::new(&folder)) && !folder.contains('/'), "repo folder {folder:?}");
            }
        }
        1 => {
            if let Ok(c) = names::commit("X-Repo-Commit", s) {
                assert!(c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()), "commit {c:?}");
            }
        }
        2 => {
            if let Ok(e) = names::etag("ETag", s) {
                assert!(!e.is_empty() && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'), "etag {e:?}");
            }
        }
        3 => {
            if let Ok(p) = names::file("file", s) {
                assert!(plain(&p) && p.is_relative(), "file {p:?}");
            }
        }
        4 => {
            if let Ok(u) = names::endpoint(s) {
                // A scheme is case-insensitive (RFC 3986): `Https://` is https.
                let lower = u.to_ascii_lowercase();
                assert!(!u.chars().any(char::is_control) && (lower.starts_with("http://") || lower.starts_with("https://")), "endpoint {u:?}");
            }
        }
        5 => {
            if let Ok(u) = names::redirect("https://hub.example/org/x/resolve/main/f.json", s) {
                let lower = u.to_ascii_lowercase();
                assert!(!u.chars().any(|c| c.is_control() || c.is_whitespace()), "redirect {u:?}");
                assert!(lower.starts_with("http://") || lower.starts_with("https://"), "redirect {u:?}");
            }
        }
        _ => {
            let dir = common::scratch().join("m");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("model.safetensors.index.json"), rest).unwrap();
            if let Ok(files) = Safetensors::files_in(&dir) {
                for f in files {
                    let rel = f.strip_prefix(&dir).expect("a shard outside the model folder");
                    assert!(plain(rel), "shard {f:?}");
                }
            }
        }
    }
});
