//! The hf-hub cache layout, shared with huggingface-cli: `<cache>/models--org--name/` holding
//! `blobs/<etag>`, `snapshots/<commit>/<file>` (a relative symlink to the blob) and `refs/main`.
//! Every folder below the cache root is made one component at a time and must be a real folder:
//! a symlink planted in the cache is refused, never written through.

use crate::error::{LabError, Result};
use crate::model::load::hub::names;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// One repo's folder in a cache.
#[derive(Clone)]
pub struct RepoCache {
    pub root: PathBuf,
    /// `models--org--name`, from a checked repo id.
    folder: String,
}

impl RepoCache {
    pub fn new(root: &Path, repo: &str) -> Self {
        Self { root: root.to_path_buf(), folder: names::repo_folder(repo) }
    }

    pub fn repo_dir(&self) -> PathBuf {
        self.root.join(&self.folder)
    }

    /// The commit `refs/main` names, when it is a regular file holding a commit id.
    pub fn main_ref(&self) -> Option<String> {
        let dir = self.existing(&["refs"])?;
        let text = crate::paths::read_own_text(&dir.join("main"), 256).ok()?;
        Some(text.trim().to_string()).filter(|c| names::is_commit(c))
    }

    /// The snapshot folder of `commit` when it is there as real folders.
    pub fn snapshot(&self, commit: &str) -> Option<PathBuf> {
        self.existing(&["snapshots", commit])
    }

    /// `file` of the snapshot `commit` when the cache holds it: a regular file, or a symlink that
    /// stays inside the repo folder (`../../blobs/<etag>`) to a regular blob.
    pub fn cached(&self, commit: &str, file: &Path) -> Option<PathBuf> {
        let dir = self.snapshot(commit)?;
        let parent = file.parent().map(|p| p.components().count()).unwrap_or(0);
        let mut parts: Vec<String> = vec!["snapshots".into(), commit.into()];
        if let Some(p) = file.parent() {
            parts.extend(p.components().map(|c| c.as_os_str().to_string_lossy().to_string()));
        }
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        self.existing(&refs)?;
        let path = dir.join(file);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if meta.is_file() {
            return Some(path);
        }
        if !meta.file_type().is_symlink() {
            return None;
        }
        // The link must climb exactly out of the snapshot into blobs/.
        let target = std::fs::read_link(&path).ok()?;
        let comps: Vec<Component> = target.components().collect();
        let ups = comps.iter().take_while(|c| matches!(c, Component::ParentDir)).count();
        let tail = comps.get(ups..).unwrap_or_default();
        let rest: Vec<String> = tail.iter().map(|c| c.as_os_str().to_string_lossy().to_string()).collect();
        let blob_ok = ups == parent + 2
            && rest.len() == 2
            && rest.first().is_some_and(|b| b == "blobs")
            && tail.iter().all(|c| matches!(c, Component::Normal(_)));
        let blobs = self.existing(&["blobs"])?;
        let blob = blobs.join(rest.get(1)?);
        (blob_ok && std::fs::symlink_metadata(&blob).is_ok_and(|m| m.is_file())).then_some(path)
    }

    /// `repo_dir/parts…` when every component is a real folder (no symlink).
    fn existing(&self, parts: &[&str]) -> Option<PathBuf> {
        let mut dir = self.repo_dir();
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return None;
        }
        for p in parts {
            dir.push(p);
            if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                return None;
            }
        }
        Some(dir)
    }

    /// `repo_dir/parts…`, each folder created when missing and refused when it is anything but a
    /// real folder. The cache root itself is the user's and may be a link.
    pub fn folder(&self, parts: &[&str]) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| LabError::input(format!("hub: cannot create the cache {}: {e}", self.root.display())))?;
        let mut dir = self.root.clone();
        for p in std::iter::once(self.folder.as_str()).chain(parts.iter().copied()) {
            dir.push(p);
            real_folder(&dir)?;
        }
        Ok(dir)
    }

    /// The blob named `etag` when it is there as a regular file.
    pub fn blob(&self, etag: &str) -> Option<PathBuf> {
        let path = self.existing(&["blobs"])?.join(etag);
        std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()).then_some(path)
    }

    /// A fresh temporary file beside the blob `etag` (O_EXCL | O_NOFOLLOW). Partial files that
    /// processes gone from this machine left behind are removed first.
    pub fn temp_blob(&self, etag: &str) -> Result<(File, PathBuf)> {
        let blobs = self.folder(&["blobs"])?;
        remove_stale_partials(&blobs);
        let path = blobs.join(format!("{etag}.{}.incomplete", std::process::id()));
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            // Our own leftover from a run of the same process id.
            let _ = std::fs::remove_file(&path);
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| LabError::input(format!("hub: cannot create {}: {e}", path.display())))?;
        Ok((f, path))
    }

    /// Moves a finished temporary file to `blobs/<etag>`, refusing to replace anything that is not
    /// a regular file there.
    pub fn finish_blob(&self, temp: &Path, etag: &str) -> Result<PathBuf> {
        let path = self.folder(&["blobs"])?.join(etag);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            let _ = std::fs::remove_file(temp);
            return Err(LabError::input(format!("hub: {} exists and is not a regular file", path.display())));
        }
        std::fs::rename(temp, &path).map_err(|e| {
            let _ = std::fs::remove_file(temp);
            LabError::input(format!("hub: cannot move the download to {}: {e}", path.display()))
        })?;
        Ok(path)
    }

    /// `snapshots/<commit>/<file>` as a relative symlink to `blobs/<etag>`.
    pub fn link(&self, commit: &str, file: &Path, etag: &str) -> Result<PathBuf> {
        let mut parts: Vec<String> = vec!["snapshots".into(), commit.into()];
        if let Some(p) = file.parent() {
            parts.extend(p.components().map(|c| c.as_os_str().to_string_lossy().to_string()));
        }
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let dir = self.folder(&refs)?;
        let name =
            file.file_name().ok_or_else(|| LabError::input(format!("hub: `{}` has no file name", file.display())))?;
        let path = dir.join(name);
        let ups = "../".repeat(parts.len());
        let target = PathBuf::from(format!("{ups}blobs/{etag}"));
        // Another process of a shared cache may have made the same link: that is success.
        if std::fs::read_link(&path).is_ok_and(|t| t == target) {
            return Ok(path);
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink()) {
            return Err(LabError::input(format!(
                "hub: {} exists and is not a link the lab made: the lab does not replace it",
                path.display()
            )));
        }
        // Made under a name of this process and renamed over the old link (of another blob), never
        // removed first: a process listing the snapshot meanwhile sees the old link or the new one.
        let temp = dir.join(format!(".{}.{}.link", name.to_string_lossy(), std::process::id()));
        let _ = std::fs::remove_file(&temp);
        std::os::unix::fs::symlink(&target, &temp).and_then(|_| std::fs::rename(&temp, &path)).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            LabError::input(format!("hub: cannot link {}: {e}", path.display()))
        })?;
        Ok(path)
    }

    /// Drops the snapshot entry `file` of `commit` and the blob it links to: a damaged file the
    /// next download replaces. Only what `cached` accepts (a link into blobs/, a regular file) goes.
    pub fn forget(&self, commit: &str, file: &Path) {
        let Some(path) = self.cached(commit, file) else { return };
        if let Some(blob) = std::fs::read_link(&path).ok().and_then(|t| t.file_name().map(|n| n.to_owned())) {
            self.forget_blob(&blob.to_string_lossy());
        }
        let _ = std::fs::remove_file(&path);
    }

    /// Removes `blobs/<etag>` when it is a regular file.
    pub fn forget_blob(&self, etag: &str) {
        if let Some(blob) = self.blob(etag) {
            let _ = std::fs::remove_file(blob);
        }
    }

    /// Points `refs/main` at `commit`.
    pub fn set_main(&self, commit: &str) -> Result<()> {
        let dir = self.folder(&["refs"])?;
        crate::paths::replace_own(&dir.join("main"), commit.as_bytes())
    }
}

/// A partial file is stale when the process its name carries (`<etag>.<pid>.incomplete`) is
/// not running here and nothing wrote to it for ten minutes: a live download writes at least
/// once a stall limit, and a process of another container sharing the cache has a pid that may
/// not exist here.
const STALE_PARTIAL: std::time::Duration = std::time::Duration::from_secs(600);

fn remove_stale_partials(blobs: &Path) {
    let Ok(entries) = std::fs::read_dir(blobs) else { return };
    for e in entries.flatten().take(100_000) {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) =
            name.strip_suffix(".incomplete").and_then(|n| n.rsplit_once('.')).and_then(|(_, p)| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else { continue };
        let idle = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|d| d > STALE_PARTIAL);
        if meta.is_file() && pid > 0 && pid as u32 != std::process::id() && !running(pid) && idle {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Whether a process `pid` runs on this machine (kill with no signal: ESRCH when none).
fn running(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Creates `dir` when missing; refuses it when it is a symlink, a file or a device.
fn real_folder(dir: &Path) -> Result<()> {
    let refuse = || {
        LabError::input(format!(
            "hub: {} in the cache is not a folder (a link or a file): the lab does not write through it",
            dir.display()
        ))
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(refuse()),
        Err(_) => match std::fs::create_dir(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
                    Ok(())
                } else {
                    Err(refuse())
                }
            }
            Err(e) => Err(LabError::input(format!("hub: cannot create {}: {e}", dir.display()))),
        },
    }
}

/// Bytes free to the user on the filesystem holding `dir` (statvfs), or None when unknown.
#[allow(clippy::unnecessary_cast)]
pub fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed struct the call fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}
