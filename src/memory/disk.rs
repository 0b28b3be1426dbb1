//! Reading weight files from disk: drop a file's pages from the page cache
//! (`posix_fadvise(DONTNEED)`, as `vmtouch -e` does: no root needed for clean pages, unlike
//! `/proc/sys/vm/drop_caches`), how much of it the cache holds (`mincore`), and a timed sequential
//! read. A cold read is only as cold as the cache let it be, so the fraction resident is reported
//! beside every read rather than assumed.

use crate::error::Result;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bytes read and the seconds they took.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ReadTime {
    pub bytes: u64,
    pub seconds: f64,
}

impl ReadTime {
    pub fn gbs(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Total size of `files`.
pub fn size(files: &[PathBuf]) -> Result<u64> {
    files.iter().map(|f| Ok(std::fs::metadata(f)?.len())).sum()
}

/// Asks the kernel to drop `files`' cached pages (written back first, since dirty pages stay).
pub fn evict(files: &[PathBuf]) -> Result<()> {
    for f in files {
        let file = File::open(f)?;
        file.sync_all()?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid descriptor; advice on the whole file (offset 0, length 0).
            let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc).into());
            }
        }
    }
    Ok(())
}

/// The fraction of `files`' pages in the page cache now (None where `mincore` is not available).
pub fn resident(files: &[PathBuf]) -> Result<Option<f64>> {
    let (mut pages, mut cached) = (0u64, 0u64);
    for f in files {
        match resident_pages(f)? {
            Some((p, c)) => {
                pages += p;
                cached += c;
            }
            None => return Ok(None),
        }
    }
    Ok(Some(if pages == 0 { 1.0 } else { cached as f64 / pages as f64 }))
}

#[cfg(target_os = "linux")]
fn resident_pages(path: &Path) -> Result<Option<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    let file = File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(Some((0, 0)));
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a read-only shared mapping of an open file, unmapped below; mincore only reads
    // the page tables, it touches no page.
    unsafe {
        let addr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        let mut vec = vec![0u8; len.div_ceil(page)];
        let rc = libc::mincore(addr, len, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(addr, len);
        if rc != 0 {
            return Err(err.into());
        }
        Ok(Some((vec.len() as u64, vec.iter().filter(|&&b| b & 1 == 1).count() as u64)))
    }
}

#[cfg(not(target_os = "linux"))]
fn resident_pages(_path: &Path) -> Result<Option<(u64, u64)>> {
    Ok(None)
}

/// Bytes free for an unprivileged writer on the filesystem holding `path` (or its nearest
/// existing parent); None where statvfs is not available.
pub fn free_bytes(path: &Path) -> Result<Option<u64>> {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(parent) => p = parent,
            None => return Ok(None),
        }
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| crate::error::LabError::input(e.to_string()))?;
        // SAFETY: a NUL-terminated path and a zeroed struct statvfs fills.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Some(st.f_bavail as u64 * st.f_frsize as u64))
    }
    #[cfg(not(target_os = "linux"))]
    Ok(None)
}

/// Reads `files` start to end in 16 MiB pieces, as a loader streaming them would.
pub fn read(files: &[PathBuf]) -> Result<ReadTime> {
    let mut buf = vec![0u8; 16 << 20];
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for f in files {
        let mut file = File::open(f)?;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    Ok(ReadTime { bytes, seconds: t0.elapsed().as_secs_f64() })
}

/// Writes `data` to `path` and flushes it to the disk, timed (what saving a checkpoint costs).
pub fn write_synced(path: &Path, data: &[u8]) -> Result<ReadTime> {
    use std::io::Write;
    let t0 = Instant::now();
    let mut f = File::create(path)?;
    f.write_all(data)?;
    f.sync_all()?;
    Ok(ReadTime { bytes: data.len() as u64, seconds: t0.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_returns_every_byte_and_residency_follows_reads() {
        let dir = std::env::temp_dir().join(format!("vram-lab-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.bin");
        let data: Vec<u8> = (0..(3 << 20) + 123).map(|i| (i % 251) as u8).collect();
        let w = write_synced(&f, &data).unwrap();
        assert_eq!(w.bytes, data.len() as u64);
        let files = vec![f.clone()];
        assert_eq!(size(&files).unwrap(), data.len() as u64);
        // A path not made yet is measured on its nearest existing parent.
        let free = free_bytes(&dir.join("not/yet")).unwrap().unwrap();
        let here = free_bytes(&dir).unwrap().unwrap();
        assert!(free > 0 && free.abs_diff(here) < 64 << 20, "{free} vs {here}");
        let r = read(&files).unwrap();
        assert_eq!(r.bytes, data.len() as u64);
        // Just read: the pages are cached (the kernel may still drop some under pressure).
        if let Some(frac) = resident(&files).unwrap() {
            assert!(frac > 0.5, "resident after a read: {frac}");
            evict(&files).unwrap();
            // tmpfs keeps its pages whatever the advice: only a real disk's cache drops.
            let after = resident(&files).unwrap().unwrap();
            assert!(after <= frac, "eviction raised residency: {frac} → {after}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
