//! A card's capacity as one fixed range of host address space, handed out by a first-fit heap
//! (`linked_list_allocator`): an allocator with no page remapping, as a GPU allocator without
//! virtual memory, or PyTorch's blocks carved from one segment. On a CPU the allocator stage
//! drives it in step with its model, so a false OOM (a request refused while the holes together
//! would hold it) is measured there too, by real allocations in a real range.
//!
//! The range is reserved, not committed (`MAP_NORESERVE`): only the heap's hole headers touch
//! pages, so a 24 GB card costs a few KiB of RAM.

use super::DeviceAllocator;
use crate::error::{LabError, OomReport, Result};
use crate::memory::policy::{round_up, GRANULE};
use linked_list_allocator::Heap;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;

pub struct HostArena {
    base: NonNull<u8>,
    capacity: u64,
    heap: Heap,
    /// handle → (pointer, bytes asked)
    live: BTreeMap<u64, (NonNull<u8>, u64)>,
    next: u64,
}

/// Blocks are whole granules on granule boundaries, as the driver maps them.
fn layout(bytes: u64) -> Result<Layout> {
    Layout::from_size_align(round_up(bytes) as usize, GRANULE as usize).map_err(LabError::other)
}

impl HostArena {
    /// Reserves `capacity` bytes of address space (rounded down to granules). A system that
    /// refuses the reservation (strict overcommit) is an error the stage reports, not a panic.
    #[cfg(unix)]
    pub fn new(capacity: u64) -> Result<Self> {
        let capacity = capacity / GRANULE * GRANULE;
        if capacity == 0 {
            return Err(LabError::input("the host arena needs at least one 2 MiB granule"));
        }
        // One granule more, so the heap can start on a granule boundary.
        let span = (capacity + GRANULE) as usize;
        // SAFETY: an anonymous private mapping; unmapped once, in Drop.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(LabError::other(format!(
                "reserving {} of address space for the host arena: {}",
                crate::units::fmt_bytes(span as u64),
                std::io::Error::last_os_error()
            )));
        }
        let mapped = raw as usize;
        let start = mapped.div_ceil(GRANULE as usize) * GRANULE as usize;
        // SAFETY: [start, start + capacity) lies inside the mapping and nothing else uses it.
        let heap = unsafe { Heap::new(start as *mut u8, capacity as usize) };
        let base = NonNull::new(raw as *mut u8).ok_or_else(|| LabError::other("mmap returned null"))?;
        Ok(Self { base, capacity, heap, live: BTreeMap::new(), next: 1 })
    }

    #[cfg(not(unix))]
    pub fn new(_capacity: u64) -> Result<Self> {
        Err(LabError::other("the host arena reserves address space with mmap: Unix only"))
    }

    fn offset_end(&self, ptr: NonNull<u8>, bytes: u64) -> u64 {
        let start = self.heap.bottom() as u64;
        ptr.as_ptr() as u64 - start + round_up(bytes)
    }

    /// The end of the highest live block.
    fn top(&self) -> u64 {
        self.live.values().map(|&(p, b)| self.offset_end(p, b)).max().unwrap_or(0)
    }
}

impl Drop for HostArena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this span; the heap's pointers die with it.
        #[cfg(unix)]
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, (self.capacity + GRANULE) as usize);
        }
    }
}

impl DeviceAllocator for HostArena {
    fn alloc(&mut self, bytes: u64) -> Result<u64> {
        let l = layout(bytes)?;
        match self.heap.allocate_first_fit(l) {
            Ok(p) => {
                let h = self.next;
                self.next += 1;
                self.live.insert(h, (p, bytes));
                Ok(h)
            }
            Err(()) => Err(LabError::Oom(Box::new(OomReport {
                request_bytes: Some(bytes),
                message: format!("no free range of {} in the host arena", crate::units::fmt_bytes(l.size() as u64)),
                ..Default::default()
            }))),
        }
    }

    fn free(&mut self, handle: u64) {
        let Some((p, bytes)) = self.live.remove(&handle) else { return };
        if let Ok(l) = layout(bytes) {
            // SAFETY: p came from allocate_first_fit with this layout and is freed once.
            unsafe { self.heap.deallocate(p, l) };
        }
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    /// The pages above the highest live block are given back.
    fn trim(&mut self) -> Result<()> {
        #[cfg(unix)]
        {
            // SAFETY: sysconf reads a constant of the system.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
            // The heap keeps the free range's header in its first bytes, at the top: that page stays.
            let from = self.top() + page;
            if from < self.capacity {
                // SAFETY: pages of this arena's mapping above every live block and that header.
                unsafe {
                    libc::madvise(
                        (self.heap.bottom() as u64 + from) as *mut libc::c_void,
                        (self.capacity - from) as usize,
                        libc::MADV_DONTNEED,
                    )
                };
            }
        }
        Ok(())
    }

    fn allocated(&self) -> u64 {
        self.live.values().map(|(_, b)| b).sum()
    }

    /// The range in use: up to the end of the highest live block (what lies below it, holes
    /// included, cannot be given back).
    fn reserved(&self) -> u64 {
        self.top()
    }

    fn device_free(&self) -> u64 {
        self.capacity - self.heap.used() as u64
    }

    fn fits(&mut self, bytes: u64) -> Result<bool> {
        Ok(match self.alloc(bytes) {
            Ok(h) => {
                self.free(h);
                true
            }
            Err(LabError::Oom(_)) => false,
            Err(e) => return Err(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_do_not_add_up_in_one_range() {
        let mut a = HostArena::new(64 << 20).unwrap();
        let blocks: Vec<u64> = (0..8).map(|_| a.alloc(8 << 20).unwrap()).collect();
        assert!(matches!(a.alloc(1), Err(LabError::Oom(_))));
        for h in blocks.iter().skip(1).step_by(2) {
            a.free(*h);
        }
        assert_eq!(a.device_free(), 32 << 20);
        // 32 MiB free in four 8 MiB holes: 16 MiB is refused, 8 MiB fits.
        assert!(!a.fits(16 << 20).unwrap());
        assert!(a.fits(8 << 20).unwrap());
        assert!(matches!(a.alloc(16 << 20), Err(LabError::Oom(_))));
        // Freeing a neighbour joins two holes.
        a.free(blocks[2]);
        assert!(a.fits(24 << 20).unwrap());
        assert_eq!(a.allocated(), 3 * (8 << 20));
        // Blocks 0, 4 and 6 live: the range in use ends with block 6.
        assert_eq!(a.reserved(), 56 << 20);
        a.free(blocks[6]);
        a.trim().unwrap();
        // Blocks 0 and 4 live: the range up to block 4's end stays.
        assert_eq!(a.reserved(), 40 << 20);
    }
}
