//! One file per report stage. Each takes the `Lab` (device, probe, model source, console) and a
//! config, runs, and returns tables.

pub mod anatomy;
pub mod kv;

use crate::memory::MemoryProbe;
use crate::model::{ModelSource, SourceOptions};
use crate::report::Console;
use candle_core::Device;

/// What every stage runs with.
pub struct Lab {
    pub device: Device,
    pub probe: MemoryProbe,
    pub source: ModelSource,
    pub opts: SourceOptions,
    pub console: Console,
    pub show_progress: bool,
}

impl Lab {
    pub fn new(device: Device, source: ModelSource, opts: SourceOptions) -> Self {
        let probe = MemoryProbe::new(&device);
        Self { device, probe, source, opts, console: Console::default(), show_progress: false }
    }

    pub fn say(&mut self, s: impl AsRef<str>) {
        self.console.line(s);
    }

    pub fn progress_bar(&self, what: &str) -> Option<indicatif::ProgressBar> {
        if !self.show_progress {
            return None;
        }
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} tensors {elapsed}") {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(what.to_string());
        Some(pb)
    }

    /// Memory bandwidth of the GPU this runs on (vendor figure), when it is a known card.
    pub fn own_bandwidth_gbs(&self) -> Option<f64> {
        crate::device::own_card(&self.device).map(|c| c.bandwidth_gbs)
    }
}
