//! Names that become paths, and files the lab writes. Every name read from a file, a server or a
//! manifest is data: it becomes a path only as a relative name of plain components inside the
//! folder it belongs to (`rel_name`). The lab creates its own files without following symlinks
//! (`write_new`), replaces only regular files (`replace_own`) and reads a named file only when it
//! is a regular file of bounded size (`read_regular`), so a FIFO, a device or a link planted in a
//! folder neither hangs a run nor redirects a write (docs/hostile-inputs.md).

use crate::error::{LabError, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// The longest name the lab accepts from a file (a Hub repo path, a manifest entry).
pub const MAX_NAME: usize = 1024;
/// The most folders deep such a name may go.
pub const MAX_DEPTH: usize = 8;

/// `name` as a relative path of plain components (letters, digits, `.`, `_`, `-`, `+`, `@`, `=`,
/// `,` and non-ASCII letters; no `.` or `..` component, no leading `/`, no backslash or control
/// character), or an error naming `what` and the name escaped.
pub fn rel_name(what: &str, name: &str) -> Result<PathBuf> {
    let bad = |why: &str| LabError::input(format!("{what} `{}` {why}", name.escape_debug()));
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(bad(&format!("is not a file name (empty or over {MAX_NAME} bytes)")));
    }
    if name.starts_with('/') || name.contains('\\') {
        return Err(bad("is not a relative name inside its folder"));
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() > MAX_DEPTH {
        return Err(bad(&format!("goes more than {MAX_DEPTH} folders deep")));
    }
    for part in &parts {
        if part.is_empty() || *part == "." || *part == ".." {
            return Err(bad("climbs out of its folder or has an empty part"));
        }
        let ok = |c: char| c.is_alphanumeric() || "._-+@=,".contains(c);
        if !part.chars().all(ok) {
            return Err(bad("holds a character the lab does not take in a file name"));
        }
    }
    let path = PathBuf::from(name);
    debug_assert!(path.components().all(|c| matches!(c, Component::Normal(_))));
    Ok(path)
}

/// `dir/name` for a checked `name`.
pub fn inside(dir: &Path, what: &str, name: &str) -> Result<PathBuf> {
    let rel = rel_name(what, name)?;
    // The folders between `dir` and the file are real folders where they exist: a stage folder
    // that is a link would carry a read or a write outside `dir`.
    let mut at = dir.to_path_buf();
    for part in rel.parent().map(|p| p.components().collect::<Vec<_>>()).unwrap_or_default() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| !m.is_dir()) {
            return Err(LabError::input(format!(
                "{what} `{}`: {} is a link or a file, not a folder",
                name.escape_debug(),
                at.display()
            )));
        }
    }
    Ok(dir.join(rel))
}

/// Folders a walk enters at most, and entries it looks at at most: a results folder is a few
/// hundred runs.
const WALK_DEPTH: usize = 16;
const WALK_ENTRIES: usize = 1_000_000;

/// The regular files under `dir` (sorted) whose path `want` takes, found without following a
/// link: a link to a folder (a loop back to `.`) or to a device, a FIFO or a socket is passed
/// over, and each folder is entered once.
pub fn walk_files(dir: &Path, want: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut looked = 0usize;
    while let Some((d, depth)) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else { continue };
        if !meta.is_dir() || !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            looked += 1;
            if looked > WALK_ENTRIES {
                break;
            }
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && depth < WALK_DEPTH {
                stack.push((e.path(), depth + 1));
            } else if t.is_file() && want(&e.path()) {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Opens `path` for reading without blocking on a FIFO, and only if it is a regular file of at
/// most `max` bytes; with `follow` false a final symlink is refused too (a run folder holds none
/// the lab made; a model folder in the Hub cache is made of them). Returns the file and its size.
pub fn open_regular(path: &Path, max: u64, follow: bool) -> Result<(File, u64)> {
    let flags = libc::O_NONBLOCK | if follow { 0 } else { libc::O_NOFOLLOW };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| LabError::input(format!("cannot open {}: {}", path.display(), why(&e))))?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(LabError::input(format!("{} is not a regular file", path.display())));
    }
    if meta.len() > max {
        return Err(LabError::input(format!(
            "{} holds {} bytes, more than the {} the lab reads from such a file",
            path.display(),
            meta.len(),
            max
        )));
    }
    Ok((f, meta.len()))
}

fn read_bounded(path: &Path, max: u64, follow: bool) -> Result<Vec<u8>> {
    let (f, len) = open_regular(path, max, follow)?;
    let mut out = Vec::with_capacity(len as usize);
    // take: a file that grows while it is read stops at the bound.
    f.take(max).read_to_end(&mut out)?;
    Ok(out)
}

fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| LabError::input(format!("{} is not UTF-8 text", path.display())))
}

/// The bytes of a regular file of at most `max` bytes, through symlinks (a model folder's file).
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>> {
    read_bounded(path, max, true)
}

/// The text of a regular file of at most `max` bytes, through symlinks.
pub fn read_regular_text(path: &Path, max: u64) -> Result<String> {
    utf8(path, read_regular(path, max)?)
}

/// The text of a file the lab wrote into a run folder: regular, not a symlink, at most `max` bytes.
pub fn read_own_text(path: &Path, max: u64) -> Result<String> {
    utf8(path, read_bounded(path, max, false)?)
}

fn why(e: &std::io::Error) -> String {
    // ELOOP is what O_NOFOLLOW answers for a symlink.
    if e.raw_os_error() == Some(libc::ELOOP) {
        "it is a symbolic link".into()
    } else {
        e.to_string()
    }
}

/// Creates `path` and writes `bytes`; refuses when anything, a symlink included, is there.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| LabError::input(format!("cannot create {}: {}", path.display(), why(&e))))?;
    f.write_all(bytes)?;
    Ok(())
}

/// Writes `bytes` to `path`, which is either absent or a regular file (one the lab wrote before:
/// a run folder's report.html, its manifest): the new content goes to a fresh file beside it and
/// is renamed over it, so a symlink, a FIFO or a device at `path` is refused, never followed.
pub fn replace_own(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_file() {
            return Err(LabError::input(format!(
                "{} exists and is not a regular file (a link, a folder or a device): the lab does not replace it",
                path.display()
            )));
        }
    }
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    // A write cut short (a full disk) leaves no temporary file behind.
    write_new(&tmp, bytes).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        LabError::input(format!("cannot replace {}: {e}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_climb_or_hide_are_refused() {
        for ok in [
            "config.json",
            "model-00001-of-00002.safetensors",
            "sub/dir/x.gguf",
            "Qwen2.5-7B_q4+k@v=1,2.gguf",
            "中文.json",
        ] {
            assert_eq!(rel_name("file", ok).unwrap(), PathBuf::from(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/.",
            "a\\b",
            "a\nb",
            "a b",
            "a\0b",
            "x/",
            &"a/".repeat(9),
            &"x".repeat(1025),
        ] {
            let e = rel_name("file", bad).unwrap_err().to_string();
            assert!(e.starts_with("file `"), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{bad:?}: the name is escaped: {e}");
        }
    }

    #[test]
    fn writes_refuse_links_and_devices_and_reads_refuse_fifos() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("users-file");
        std::fs::write(&target, "mine").unwrap();
        let link = dir.path().join("report.html");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_new(&link, b"x").unwrap_err().to_string().contains("cannot create"));
        assert!(replace_own(&link, b"x").unwrap_err().to_string().contains("not a regular file"));
        assert!(read_own_text(&link, 100).unwrap_err().to_string().contains("symbolic link"));
        assert_eq!(read_regular_text(&link, 100).unwrap(), "mine", "a model folder's links are followed");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        assert!(replace_own(Path::new("/dev/null"), b"x").is_err());

        let own = dir.path().join("own.txt");
        replace_own(&own, b"one").unwrap();
        replace_own(&own, b"two").unwrap();
        assert_eq!(read_regular_text(&own, 3).unwrap(), "two");
        assert!(read_regular(&own, 2).unwrap_err().to_string().contains("more than the 2"));

        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read_regular(&fifo, 100).unwrap_err().to_string().contains("not a regular file"));
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(entries.len(), 4, "no temporary file left: {entries:?}");
    }
}
