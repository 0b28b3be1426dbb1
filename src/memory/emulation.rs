//! Emulating a smaller card on a larger GPU (or on CPU).
//!
//! The emulated card has the capacity its driver reports as total (cuMemGetInfo), and everything
//! this process already uses (context, libraries) counts against it, as it would on that card. On
//! a GPU the lab holds a ballast of `total - card total` outside the allocator's pool; on CPU the
//! lab's counting allocator enforces the capacity. The emulation belongs to one device's
//! `MemoryProbe`; dropping it releases the ballast (or lifts the CPU cap) on every way out.

use super::{fmt_bytes, host};
use crate::error::Result;
use crate::hw::Card;
use candle_core::Device;

/// While alive, the device looks like `card`.
pub struct CardEmulation {
    pub card: Card,
    /// Bytes held outside the pool (0 on CPU).
    pub ballast: u64,
    #[cfg(feature = "cuda")]
    _held: Option<super::cuda::DeviceBallast>,
}

impl CardEmulation {
    pub fn start(card: &Card, device: &Device) -> Result<Self> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => {
                let (free, total) = super::cuda::mem_info(dev)?;
                let want = card.total_bytes();
                if want > total {
                    return Err(crate::error::LabError::Unsupported(format!(
                        "card {} ({}) is larger than this GPU ({})",
                        card.name,
                        fmt_bytes(want),
                        fmt_bytes(total)
                    )));
                }
                let ballast = total - want;
                if ballast > free {
                    return Err(crate::error::LabError::Unsupported(format!(
                        "cannot emulate {}: {} is already in use on this GPU, more than the card has",
                        card.name,
                        fmt_bytes(total - free)
                    )));
                }
                let held = super::cuda::DeviceBallast::new(dev, ballast)?;
                Ok(Self { card: card.clone(), ballast, _held: Some(held) })
            }
            _ => {
                // The CPU has one heap and one counting allocator: its cap is process-wide.
                host::set_cap(Some(card.total_bytes()));
                Ok(Self {
                    card: card.clone(),
                    ballast: 0,
                    #[cfg(feature = "cuda")]
                    _held: None,
                })
            }
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "emulating {} ({}: {}); ballast {}",
            self.card.label,
            fmt_bytes(self.card.total_bytes()),
            self.card.total_source,
            fmt_bytes(self.ballast)
        )
    }
}

impl Drop for CardEmulation {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if self._held.is_some() {
            return; // the ballast frees itself
        }
        host::set_cap(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_emulation_sets_and_lifts_the_cap() {
        let card = Card::parse("64MiB").unwrap();
        let e = CardEmulation::start(&card, &Device::Cpu).unwrap();
        assert_eq!(host::cap(), Some(64 << 20));
        assert_eq!(e.ballast, 0);
        drop(e);
        assert_eq!(host::cap(), None);
    }
}
