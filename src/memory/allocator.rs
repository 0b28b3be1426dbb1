//! Raw device allocations under one policy: the interface the allocator stage drives.

use crate::error::Result;

/// Raw device allocations under one policy (`device_arena::DeviceArena` on CUDA): what the
/// allocator stage drives in step with its model. A refusal is `LabError::Oom` with the request.
pub trait DeviceAllocator {
    /// A new block of `bytes`; returns its handle.
    fn alloc(&mut self, bytes: u64) -> Result<u64>;
    fn free(&mut self, handle: u64);
    fn synchronize(&mut self) -> Result<()>;
    /// torch.cuda.empty_cache: give cached memory back.
    fn trim(&mut self) -> Result<()>;
    /// Bytes asked for by the live blocks.
    fn allocated(&self) -> u64;
    /// Bytes held from the driver.
    fn reserved(&self) -> u64;
    /// cuMemGetInfo's free bytes.
    fn device_free(&self) -> u64;
    /// Would `bytes` be allocated now? Tried and undone.
    fn fits(&mut self, bytes: u64) -> Result<bool>;
}
