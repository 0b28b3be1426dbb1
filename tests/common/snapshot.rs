//! A folder's every path and what it is, without following links: taken before and after a run,
//! any difference is a file created, changed, replaced or removed (a write through a link shows
//! as its target's new content).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a path is, as far as a change to it would show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Dir,
    /// Length, modification time (s, ns) and a hash of the bytes.
    File(u64, i64, i64, u64),
    Link(PathBuf),
    /// A FIFO, a socket or a device.
    Other,
}

/// Every path under `root` (relative) except those under `skip`.
pub fn snapshot(root: &Path, skip: Option<&Path>) -> BTreeMap<PathBuf, Seen> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if skip.is_some_and(|s| p.starts_with(s)) {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let seen = if ft.is_symlink() {
                Seen::Link(std::fs::read_link(&p).unwrap())
            } else if ft.is_dir() {
                todo.push(p.clone());
                Seen::Dir
            } else if ft.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                Seen::File(m.len(), m.mtime(), m.mtime_nsec(), h.finish())
            } else {
                Seen::Other
            };
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), seen);
        }
    }
    out
}
