//! A model of device-memory allocators, pure bookkeeping over a card's capacity: which request
//! succeeds, what stays reserved, and the largest block that could still be allocated. The
//! allocator stage runs it in step with the real driver, so every measured figure has its
//! prediction beside it, and on CPU it is the stage's whole story.
//!
//! Memory is mapped in segments (2 MiB pages); a segment is cut into blocks; a freed block may
//! stay in its segment for reuse (a cache). Four behaviours, told apart by five switches:
//! - `pool`: CUDA's stream-ordered pool as candle uses it (release threshold 0): frees are cached
//!   until the next synchronisation, which gives the free pages back;
//! - `caching`: the same pool with the release threshold at its maximum: nothing is given back.
//!   Both pool policies treat their cached pages as interchangeable: a request no free block
//!   holds is assembled from the cached pages behind a fresh virtual range before any new memory
//!   is mapped (measured on an H200, 2026-11-22: the report's 2 GiB request left the caching
//!   pool's reserved at 4.91 GiB, and a card full of holes served a request larger than any);
//! - `sync`: plain cuMemAlloc / cuMemFree, nothing cached;
//! - `one_range`: one fixed range cut by a heap, the lab's host arena on CPU.
//!
//! PyTorch's caching allocator, beside which the reference script's figures are read, is
//! `estimate::caching`.

use std::collections::BTreeMap;

use crate::memory::policy::{round_up, Policy, GRANULE};

/// What each policy does, as switches of the model.
pub fn behaviour(policy: Policy) -> Behaviour {
    match policy {
        Policy::Pool => Behaviour {
            caches_frees: true,
            release_at_sync: true,
            remap_pages: true,
            reuse_pages_first: true,
            one_range: false,
        },
        Policy::Caching => Behaviour {
            caches_frees: true,
            release_at_sync: false,
            remap_pages: true,
            reuse_pages_first: true,
            one_range: false,
        },
        Policy::Sync => Behaviour {
            caches_frees: false,
            release_at_sync: false,
            remap_pages: false,
            reuse_pages_first: false,
            one_range: false,
        },
    }
}

/// One fixed range of addresses cut by a heap (`memory::host_arena` on CPU): no page is ever
/// remapped, so free bytes serve a request only when they lie side by side.
pub fn one_range() -> Behaviour {
    Behaviour {
        caches_frees: true,
        release_at_sync: false,
        remap_pages: false,
        reuse_pages_first: false,
        one_range: true,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// A freed block stays mapped in its segment and serves later requests that fit in it.
    pub caches_frees: bool,
    /// A synchronisation releases every segment with nothing in use.
    pub release_at_sync: bool,
    /// Pages behind free blocks can be unmapped and mapped again elsewhere.
    pub remap_pages: bool,
    /// A request no free block holds takes cached pages before new memory is mapped.
    pub reuse_pages_first: bool,
    /// The whole capacity is one segment from the start; what is "reserved" is the range up to
    /// the end of the highest live block.
    pub one_range: bool,
}

#[derive(Debug, Clone)]
struct Block {
    offset: u64,
    size: u64,
    /// The handle of the allocation living here; None when free.
    owner: Option<u64>,
}

#[derive(Debug, Clone)]
struct Segment {
    blocks: Vec<Block>,
}

impl Segment {
    fn mapped(&self) -> u64 {
        self.blocks.iter().map(|b| b.size).sum()
    }
    fn idle(&self) -> bool {
        self.blocks.iter().all(|b| b.owner.is_none())
    }
}

/// The model of one allocator on a card of `capacity` bytes.
#[derive(Debug, Clone)]
pub struct AllocModel {
    pub behaviour: Behaviour,
    pub capacity: u64,
    segments: Vec<Segment>,
    live: BTreeMap<u64, u64>,
    next_handle: u64,
}

/// A request the model refused: nothing free was large enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelOom {
    pub request: u64,
    /// Mapped but free (the allocator's cache) and never mapped, at the refusal.
    pub cached: u64,
    pub unmapped: u64,
}

impl AllocModel {
    pub fn new(behaviour: Behaviour, capacity: u64) -> Self {
        let segments = if behaviour.one_range {
            vec![Segment { blocks: vec![Block { offset: 0, size: capacity / GRANULE * GRANULE, owner: None }] }]
        } else {
            Vec::new()
        };
        Self { behaviour, capacity, segments, live: BTreeMap::new(), next_handle: 1 }
    }

    /// Bytes held by live allocations (rounded to pages, as the driver maps them).
    pub fn allocated(&self) -> u64 {
        self.live.values().sum()
    }

    /// Bytes mapped from the card: live blocks and the cache.
    pub fn reserved(&self) -> u64 {
        if self.behaviour.one_range {
            return self
                .segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.owner.is_some())
                .map(|b| b.offset + b.size)
                .max()
                .unwrap_or(0);
        }
        self.segments.iter().map(Segment::mapped).sum()
    }

    /// What the card still has unmapped.
    pub fn unmapped(&self) -> u64 {
        self.capacity.saturating_sub(self.reserved())
    }

    /// The largest free block inside the segments.
    pub fn largest_hole(&self) -> u64 {
        self.segments.iter().flat_map(|s| &s.blocks).filter(|b| b.owner.is_none()).map(|b| b.size).max().unwrap_or(0)
    }

    pub fn alloc(&mut self, bytes: u64) -> Result<u64, ModelOom> {
        let size = round_up(bytes);
        let handle = self.next_handle;
        if self.behaviour.one_range {
            return match self.reuse(size, handle) {
                true => self.record(handle, size),
                false => Err(ModelOom { request: bytes, cached: self.cached(), unmapped: self.unmapped() }),
            };
        }
        if self.behaviour.caches_frees && self.reuse(size, handle) {
            return self.record(handle, size);
        }
        if self.behaviour.reuse_pages_first && self.cached() > 0 && self.cached() + self.unmapped() >= size {
            self.take_cached_pages(size);
            self.segments.push(Segment { blocks: vec![Block { offset: 0, size, owner: Some(handle) }] });
            return self.record(handle, size);
        }
        if self.unmapped() < size && self.behaviour.remap_pages {
            self.unmap_free_blocks(size);
        }
        if self.unmapped() < size {
            return Err(ModelOom {
                request: bytes,
                cached: self.reserved() - self.allocated(),
                unmapped: self.unmapped(),
            });
        }
        self.segments.push(Segment { blocks: vec![Block { offset: 0, size, owner: Some(handle) }] });
        self.record(handle, size)
    }

    fn record(&mut self, handle: u64, size: u64) -> Result<u64, ModelOom> {
        self.live.insert(handle, size);
        self.next_handle += 1;
        Ok(handle)
    }

    /// Best fit among the free blocks; the rest of the block stays free in its segment.
    fn reuse(&mut self, size: u64, handle: u64) -> bool {
        let best = self
            .segments
            .iter()
            .enumerate()
            .flat_map(|(s, seg)| seg.blocks.iter().enumerate().map(move |(b, blk)| (s, b, blk)))
            .filter(|(_, _, blk)| blk.owner.is_none() && blk.size >= size)
            .min_by_key(|(_, _, blk)| blk.size)
            .map(|(s, b, _)| (s, b));
        let Some((s, b)) = best else { return false };
        let blocks = &mut self.segments[s].blocks;
        let rest = blocks[b].size - size;
        blocks[b].size = size;
        blocks[b].owner = Some(handle);
        if rest > 0 {
            let offset = blocks[b].offset + size;
            blocks.insert(b + 1, Block { offset, size: rest, owner: None });
        }
        true
    }

    pub fn free(&mut self, handle: u64) {
        if self.live.remove(&handle).is_none() {
            return;
        }
        let Some(s) = self.segments.iter().position(|seg| seg.blocks.iter().any(|b| b.owner == Some(handle))) else {
            return;
        };
        if !self.behaviour.caches_frees {
            self.segments.remove(s);
            return;
        }
        let blocks = &mut self.segments[s].blocks;
        if let Some(b) = blocks.iter().position(|b| b.owner == Some(handle)) {
            blocks[b].owner = None;
        }
        // Neighbouring free blocks become one.
        let mut merged: Vec<Block> = Vec::with_capacity(blocks.len());
        for blk in blocks.drain(..) {
            match merged.last_mut() {
                Some(last) if last.owner.is_none() && blk.owner.is_none() && last.offset + last.size == blk.offset => {
                    last.size += blk.size
                }
                _ => merged.push(blk),
            }
        }
        *blocks = merged;
    }

    /// Mapped but free: the allocator's cache.
    pub fn cached(&self) -> u64 {
        self.reserved() - self.allocated()
    }

    /// Unmaps free blocks, largest first (the last one split), until `size` bytes are taken or
    /// the cache is empty: their pages go behind the new allocation.
    fn take_cached_pages(&mut self, size: u64) {
        let mut need = size;
        while need > 0 {
            let Some((s, b)) = self
                .segments
                .iter()
                .enumerate()
                .flat_map(|(s, seg)| seg.blocks.iter().enumerate().map(move |(b, blk)| (s, b, blk)))
                .filter(|(_, _, blk)| blk.owner.is_none())
                .max_by_key(|(_, _, blk)| blk.size)
                .map(|(s, b, _)| (s, b))
            else {
                break;
            };
            let blk = &mut self.segments[s].blocks[b];
            if blk.size > need {
                blk.size -= need;
                blk.offset += need;
                need = 0;
            } else {
                need -= blk.size;
                self.segments[s].blocks.remove(b);
            }
        }
        self.segments.retain(|s| !s.blocks.is_empty());
    }

    /// A stream / device synchronisation.
    pub fn synchronize(&mut self) {
        if self.behaviour.release_at_sync {
            if self.behaviour.remap_pages {
                // Free pages go back, wherever they sit.
                for seg in &mut self.segments {
                    seg.blocks.retain(|b| b.owner.is_some());
                }
                self.segments.retain(|s| !s.blocks.is_empty());
            } else {
                self.release_idle();
            }
        }
    }

    /// torch.cuda.empty_cache / cuMemPoolTrimTo(0): release every segment with nothing in use.
    pub fn release_idle(&mut self) {
        if self.behaviour.one_range {
            return; // the range is the card; what is free above the live blocks is not reserved
        }
        self.segments.retain(|s| !s.idle());
    }

    /// Expandable segments: unmap free blocks, largest first, until `size` fits.
    fn unmap_free_blocks(&mut self, size: u64) {
        let mut free: Vec<(u64, usize, usize)> = self
            .segments
            .iter()
            .enumerate()
            .flat_map(|(s, seg)| {
                seg.blocks.iter().enumerate().filter(|(_, b)| b.owner.is_none()).map(move |(b, blk)| (blk.size, s, b))
            })
            .collect();
        if self.unmapped() + free.iter().map(|f| f.0).sum::<u64>() < size {
            return;
        }
        free.sort_by(|a, b| b.cmp(a));
        let mut gone: Vec<(usize, usize)> = Vec::new();
        let mut room = self.unmapped();
        for (bytes, s, b) in free {
            if room >= size {
                break;
            }
            room += bytes;
            gone.push((s, b));
        }
        // Remove from the back so indices stay valid.
        gone.sort_by(|a, b| b.cmp(a));
        for (s, b) in gone {
            self.segments[s].blocks.remove(b);
        }
        self.segments.retain(|s| !s.blocks.is_empty());
    }

    /// Would a request of `bytes` succeed now? (The state is left as it was.)
    pub fn fits(&self, bytes: u64) -> bool {
        self.clone().alloc(bytes).is_ok()
    }

    /// The largest request that would succeed now, to the page.
    pub fn largest_block(&self) -> u64 {
        crate::search::bisect(0, self.capacity + GRANULE, GRANULE, |b| Ok(self.fits(b))).map(|(lo, _)| lo).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// The report's sequence: ten 500 MiB blocks, the odd ones freed, then 2 GiB.
    fn report_sequence(b: Behaviour, capacity: u64) -> (AllocModel, Vec<(u64, u64)>) {
        let mut m = AllocModel::new(b, capacity);
        let mut seen = Vec::new();
        let blocks: Vec<u64> = (0..10).map(|_| m.alloc(500 * MIB).unwrap()).collect();
        seen.push((m.allocated(), m.reserved()));
        for (i, h) in blocks.iter().enumerate() {
            if i % 2 == 1 {
                m.free(*h);
            }
        }
        m.synchronize();
        seen.push((m.allocated(), m.reserved()));
        m.alloc(2 * GIB).unwrap();
        m.synchronize();
        seen.push((m.allocated(), m.reserved()));
        (m, seen)
    }

    #[test]
    fn the_report_sequence_under_each_policy() {
        let cap = 24 * GIB;
        // The caching pool: the holes stay reserved too, but the request takes their pages.
        let (_, c) = report_sequence(behaviour(Policy::Caching), cap);
        assert_eq!(c, vec![(5000 * MIB, 5000 * MIB), (2500 * MIB, 5000 * MIB), (4548 * MIB, 5000 * MIB)]);
        // Pool with threshold 0: reserved falls to allocated at the synchronisation.
        let (_, p) = report_sequence(behaviour(Policy::Pool), cap);
        assert_eq!(p, vec![(5000 * MIB, 5000 * MIB), (2500 * MIB, 2500 * MIB), (4548 * MIB, 4548 * MIB)]);
        // Sync: nothing is ever cached.
        let (_, s) = report_sequence(behaviour(Policy::Sync), cap);
        assert_eq!(s, p);
    }

    /// Fill a card with 512 MiB blocks carved out of one freed allocation, free every other one,
    /// then ask for 2 GiB: more than any hole, less than the holes together.
    fn false_oom(b: Behaviour, reused: bool) -> (Result<u64, ModelOom>, AllocModel) {
        let cap = 24 * GIB;
        let hole = 512 * MIB;
        let mut m = AllocModel::new(b, cap);
        let n = (cap - hole / 2) / hole;
        if reused {
            let big = m.alloc(n * hole).unwrap();
            m.free(big);
        }
        let blocks: Vec<u64> = (0..n).map(|_| m.alloc(hole).unwrap()).collect();
        for h in blocks.iter().skip(1).step_by(2) {
            m.free(*h);
        }
        m.synchronize();
        assert!(m.reserved() - m.allocated() <= (n / 2) * hole);
        let r = m.alloc(4 * hole);
        (r, m)
    }

    #[test]
    fn false_oom_needs_holes_inside_a_live_segment() {
        // Releasing at the synchronisation, never caching, or taking the cached pages makes room.
        for p in [Policy::Pool, Policy::Caching, Policy::Sync] {
            for reused in [false, true] {
                assert!(false_oom(behaviour(p), reused).0.is_ok(), "{p:?} reused={reused}");
            }
        }
        // The caching pool served it from its cached pages: nothing new mapped.
        let (_, m) = false_oom(behaviour(Policy::Caching), true);
        assert_eq!(m.reserved(), 47 * 512 * MIB);
    }

    #[test]
    fn one_range_refuses_what_its_holes_hold_together() {
        // Either layout: nothing is remapped, so the holes never join into 2 GiB.
        for reused in [false, true] {
            let (r, m) = false_oom(one_range(), reused);
            let oom = r.unwrap_err();
            assert!(oom.cached >= 11 * GIB, "{oom:?}");
            assert_eq!(m.largest_block(), 512 * MIB);
        }
        // The report's sequence: block 9's hole joins the free end, so the 2 GiB starts there
        // (4,500 MiB) and the range in use ends at 6,548 MiB, not PyTorch's 7,048.
        let (m, t) = report_sequence(one_range(), 24 * GIB);
        assert_eq!(t, vec![(5000 * MIB, 5000 * MIB), (2500 * MIB, 4500 * MIB), (4548 * MIB, 6548 * MIB)]);
        assert_eq!(m.largest_block(), 24 * GIB - 6548 * MIB);
    }

    #[test]
    fn largest_block_is_free_memory_or_the_largest_hole() {
        // An allocator that neither releases nor remaps: the largest hole or what is unmapped.
        let never = Behaviour {
            release_at_sync: false,
            remap_pages: false,
            reuse_pages_first: false,
            ..behaviour(Policy::Caching)
        };
        let mut m = AllocModel::new(never, 10 * GIB);
        let a = m.alloc(4 * GIB).unwrap();
        let _b = m.alloc(4 * GIB).unwrap();
        assert_eq!(m.largest_block(), 2 * GIB);
        m.free(a);
        assert_eq!(m.largest_block(), 4 * GIB);
        assert_eq!(m.largest_hole(), 4 * GIB);
        m.release_idle();
        assert_eq!(m.largest_block(), 6 * GIB);
        // A pool whose cached pages are interchangeable: the hole and the unmapped rest together.
        let mut m = AllocModel::new(behaviour(Policy::Caching), 10 * GIB);
        let a = m.alloc(4 * GIB).unwrap();
        let _b = m.alloc(4 * GIB).unwrap();
        m.free(a);
        assert_eq!(m.largest_block(), 6 * GIB);
        assert_eq!(m.reserved(), 8 * GIB);
        // Rounding to pages.
        assert_eq!(round_up(1), GRANULE);
        assert_eq!(round_up(500 * MIB), 500 * MIB);
        assert_eq!(round_up(500 * MIB + 1), 502 * MIB);
    }

    #[test]
    fn freeing_merges_neighbours() {
        let mut m = AllocModel::new(behaviour(Policy::Caching), 4 * GIB);
        let big = m.alloc(GIB).unwrap();
        m.free(big);
        let parts: Vec<u64> = (0..4).map(|_| m.alloc(256 * MIB).unwrap()).collect();
        assert_eq!(m.reserved(), GIB);
        m.free(parts[1]);
        m.free(parts[2]);
        assert_eq!(m.largest_hole(), 512 * MIB);
    }
}
