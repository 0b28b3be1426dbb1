//! `vram-lab info`: the device and its memory, the card presets and the model presets.

use crate::error::Result;
use crate::hw::{self, Card};
use crate::memory::MemoryProbe;
use crate::model::{self, DecoderConfig};
use crate::session::SessionArgs;

/// The device, its memory summary, the card presets and the model presets.
pub fn info(args: &SessionArgs) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let probe = MemoryProbe::new(&device);
    let mut lines = vec![
        format!("device: {}", hw::describe(&device)),
        format!("cuda built in: {}", cfg!(feature = "cuda")),
        probe.summary(),
        "cards:".to_string(),
    ];
    for c in Card::presets() {
        lines.push(format!(
            "  {:<9} {:>9.1} MiB  {:>6} GB/s  {}",
            c.name,
            c.total_mib,
            c.bandwidth_gbs.unwrap_or(f64::NAN),
            c.total_source
        ));
    }
    lines.push("model presets (synthetic:<name>):".into());
    for (name, _) in model::config::PRESETS {
        lines.push(format!("  {:<13} {:>14} parameters", name, DecoderConfig::preset(name)?.param_count()));
    }
    Ok(lines.join("\n"))
}
