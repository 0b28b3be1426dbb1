//! Ctrl-C: the run stops after the step in hand, so the stages that finished keep their files.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Ctrl-C was pressed.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Ctrl-C asks the run to stop after the step in hand (the finished stages' files are kept and
/// the GPU memory is freed as the session drops); a second Ctrl-C quits at once.
pub fn stop_on_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nstopping after the current step (Ctrl-C again to quit now)");
    });
}
