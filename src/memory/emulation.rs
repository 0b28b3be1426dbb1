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
    /// CPU, scaled card: the heap held when the emulation started, counted outside the card.
    pub context: u64,
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
                Ok(Self { card: card.clone(), ballast, context: 0, _held: Some(held) })
            }
            _ => {
                // The CPU has one heap and one counting allocator: its cap is process-wide. A
                // scaled card counts above the process's context: the heap held now (the session
                // has made the buffers libraries keep after their first use).
                let context = if card.is_scaled() { host::allocated() } else { 0 };
                host::set_cap(Some(context + card.total_bytes()));
                Ok(Self {
                    card: card.clone(),
                    ballast: 0,
                    context,
                    #[cfg(feature = "cuda")]
                    _held: None,
                })
            }
        }
    }

    /// CPU, scaled card: the context is the heap held now.
    pub fn rebase(&mut self) {
        // Only where the counting allocator enforces the card (CPU): a GPU's cap is its ballast.
        if self.card.is_scaled() && host::cap().is_some() {
            self.context = host::allocated();
            host::set_cap(Some(self.context + self.card.total_bytes()));
        }
    }

    pub fn describe(&self) -> String {
        let context = if self.context > 0 {
            format!("; the process's context {} counted outside it", fmt_bytes(self.context))
        } else {
            String::new()
        };
        format!(
            "emulating {} ({}: {}); ballast {}{context}",
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
