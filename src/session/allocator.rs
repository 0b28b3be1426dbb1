//! Where a session's device tensors live (`--allocator`): candle's pool, or the lab's page
//! allocator (`memory::pages`), switched on before anything is loaded and refused where it could
//! not serve what the flag says.

use crate::error::{LabError, Result};
use crate::memory::policy::Allocator;
use candle_core::Device;

/// The commands that only price a workload: the allocator they are given changes the ledger's
/// slack and allocates nothing, so they take `--allocator pages` on any device.
const PRICING: [&str; 2] = ["estimate", "plan"];

/// Switches candle's device tensors to `allocator` before anything is loaded. The page allocator
/// serves requests only through the binary's interposed `cuMemAllocAsync`: anywhere else (a
/// notebook, the CPU) a stage that allocates would run on something else than the flag says, so
/// it is refused.
pub fn enable(allocator: Allocator, device: &Device, what: &str) -> Result<()> {
    if allocator == Allocator::Pool || (PRICING.contains(&what) && !device.is_cuda()) {
        return Ok(());
    }
    if !device.is_cuda() || !crate::memory::alloc_hook::installed() {
        return Err(LabError::Unsupported(
            "--allocator pages maps a GPU's pages through the vram-lab binary's allocation hook: run it with \
             --device cuda from the binary"
                .into(),
        ));
    }
    #[cfg(feature = "cuda")]
    crate::memory::pages::set_enabled(true);
    Ok(())
}

/// Refuses `--allocator pages` for a stage that shares tensors between GPUs: peers read each
/// other's memory through the pool's access rights, which the page allocator's pages lack.
pub fn one_pool(allocator: Allocator, stage: &str) -> Result<()> {
    match allocator {
        Allocator::Pool => Ok(()),
        a => Err(LabError::Unsupported(format!(
            "{stage} shares tensors between GPUs through the pool: --allocator {} serves one GPU",
            a.name()
        ))),
    }
}
