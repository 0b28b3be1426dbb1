//! The memory monitor on a deliberate leak of a known size. The lab's counting allocator is
//! installed in this test binary, and this file holds one test, so allocated bytes are exact.

use candle_core::Device;
use vram_lab::memory::host::CountingAlloc;
use vram_lab::memory::{Category, HeldBytes, MemoryMonitor, MemoryProbe};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A leak of 24 MiB per step is flagged, with that size within 1 %; the same loop that drops its
/// buffers is not.
#[test]
fn a_deliberate_leak_is_flagged_with_its_size() {
    const LEAK: usize = 24 << 20;
    let probe = MemoryProbe::new(&Device::Cpu);
    for leak in [true, false] {
        let mut monitor = MemoryMonitor::new(16 << 20);
        let mut kept: Vec<Vec<u8>> = Vec::new();
        monitor.mark(&probe, "start", HeldBytes::default());
        for step in 0..4 {
            let buf = vec![1u8; LEAK];
            if leak {
                kept.push(buf);
            } else {
                drop(buf);
            }
            let held = HeldBytes::of(&[(Category::Activations, (kept.len() * LEAK) as u64)]);
            monitor.mark(&probe, &format!("step {step}"), held);
        }
        let flagged = monitor.leaks();
        if leak {
            assert_eq!(flagged.len(), 4, "every step leaks");
            for g in &flagged {
                let err = (g.allocated as f64 - LEAK as f64).abs() / LEAK as f64;
                assert!(err < 0.01, "flagged growth {} B vs {LEAK} B", g.allocated);
                assert_eq!(g.main_cause(), Some("activations"));
            }
        } else {
            assert!(flagged.is_empty() && !monitor.flagged(), "{:?}", monitor.growth());
        }
        drop(kept);
    }
}
