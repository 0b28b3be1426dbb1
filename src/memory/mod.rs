//! Measuring memory, nothing else: snapshots (the counterpart of torch.cuda.memory_allocated /
//! memory_reserved / max_memory_allocated), card emulation, the summary table and timelines.
//! This file only names the parts; each lives in its own file.

pub mod alloc_hook;
pub mod allocator;
pub mod bandwidth;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod cuda_copy;
#[cfg(feature = "cuda")]
pub mod device_arena;
pub mod disk;
pub mod emulation;
pub mod host;
pub mod host_arena;
pub mod monitor;
pub mod nvml;
#[cfg(feature = "cuda")]
pub mod pages;
pub mod policy;
pub mod probe;
pub mod ranges;
pub mod snapshot;
pub mod summary;
pub mod timeline;
#[cfg(feature = "cuda")]
pub mod unified;

pub use crate::units::{fmt_bytes, gib, mib, GIB, MIB};
pub use allocator::DeviceAllocator;
pub use emulation::CardEmulation;
pub use monitor::{Category, HeldBytes, MemoryMonitor};
pub use probe::{check_managed_request, guarded, MemoryProbe};
pub use snapshot::{tensor_bytes, Snapshot};
pub use timeline::Timeline;
