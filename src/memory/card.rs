//! Card presets and the emulation of a smaller card on a larger GPU (or on CPU).
//!
//! The emulated card has the capacity its driver reports as total (cuMemGetInfo), and everything
//! this process already uses (context, libraries) counts against it, as it would on that card. On
//! a GPU the lab holds a ballast of `total - card total` outside the allocator's pool; on CPU the
//! lab's counting allocator enforces the capacity. Dropping the `CardEmulation` releases either.

use super::{fmt_bytes, host};
use crate::error::{LabError, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub name: String,
    pub label: String,
    /// What the driver reports as total on that card, in MiB.
    pub total_mib: f64,
    pub total_source: String,
    /// Memory bandwidth (vendor figure), GB/s.
    pub bandwidth_gbs: f64,
    pub pcie: String,
    pub pcie_gbs: f64,
}

const CARDS_JSON: &str = include_str!("../../data/cards.json");

static BALLAST: AtomicU64 = AtomicU64::new(0);

pub(crate) fn ballast_bytes() -> u64 {
    BALLAST.load(Relaxed)
}

impl Card {
    pub fn presets() -> Vec<Card> {
        // The file is embedded and checked by a test; an error here is a build defect.
        serde_json::from_str(CARDS_JSON).unwrap_or_default()
    }

    /// A preset name (`rtx4090`, `a4000`, …) or a size (`24GiB`, `16gib`, `512MiB`).
    pub fn parse(s: &str) -> Result<Card> {
        let key = s.trim().to_ascii_lowercase();
        if let Some(card) = Self::presets().into_iter().find(|c| c.name == key) {
            return Ok(card);
        }
        let (num, unit) = key.split_at(key.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(key.len()));
        let mib = match (num.trim().parse::<f64>(), unit) {
            (Ok(n), "gib" | "g" | "gb") if n > 0.0 => n * 1024.0,
            (Ok(n), "mib" | "m" | "mb") if n > 0.0 => n,
            _ => {
                let names: Vec<_> = Self::presets().into_iter().map(|c| c.name).collect();
                return Err(LabError::input(format!(
                    "unknown card `{s}`: use one of {} or a size such as 24GiB",
                    names.join(", ")
                )));
            }
        };
        Ok(Card {
            name: key.clone(),
            label: format!("a {} card", fmt_bytes((mib * 1024.0 * 1024.0) as u64)),
            total_mib: mib,
            total_source: "given on the command line".into(),
            bandwidth_gbs: f64::NAN,
            pcie: String::new(),
            pcie_gbs: f64::NAN,
        })
    }

    pub fn total_bytes(&self) -> u64 {
        (self.total_mib * 1024.0 * 1024.0) as u64
    }
}

/// While alive, the device looks like `card`.
pub struct CardEmulation {
    pub card: Card,
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
                    return Err(LabError::Unsupported(format!(
                        "card {} ({}) is larger than this GPU ({})",
                        card.name,
                        fmt_bytes(want),
                        fmt_bytes(total)
                    )));
                }
                let ballast = total - want;
                if ballast > free {
                    return Err(LabError::Unsupported(format!(
                        "cannot emulate {}: {} is already in use on this GPU, more than the card has",
                        card.name,
                        fmt_bytes(total - free)
                    )));
                }
                let held = super::cuda::DeviceBallast::new(dev, ballast)?;
                BALLAST.store(ballast, Relaxed);
                Ok(Self { card: card.clone(), ballast, _held: Some(held) })
            }
            _ => {
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
}

impl Drop for CardEmulation {
    fn drop(&mut self) {
        BALLAST.store(0, Relaxed);
        host::set_cap(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_sizes() {
        let cards = Card::presets();
        assert!(cards.len() >= 8);
        assert_eq!(Card::parse("RTX4090").unwrap().total_mib, 24084.5);
        assert_eq!(Card::parse("24GiB").unwrap().total_bytes(), 24 << 30);
        assert_eq!(Card::parse("512MiB").unwrap().total_bytes(), 512 << 20);
        assert!(Card::parse("rtx9090").is_err());
        assert!(Card::parse("0GiB").is_err());
    }
}
