//! Ctrl-C and SIGTERM: the run stops after the step in hand, so the stages that finished keep
//! their files; a second signal quits at once, removing the partial files being written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static STOP: AtomicBool = AtomicBool::new(false);

/// Files being written that are not yet anything of the lab's (a download's `.incomplete`).
static PARTIALS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Ctrl-C (or SIGTERM) was received.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// `path` is removed if the process is ended at once while it is being written.
pub fn track_partial(path: &Path) {
    PARTIALS.lock().unwrap_or_else(|e| e.into_inner()).push(path.to_path_buf());
}

/// `path` was finished (renamed) or removed: nothing to clean up any more.
pub fn untrack_partial(path: &Path) {
    PARTIALS.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != path);
}

/// The first Ctrl-C or SIGTERM asks the run to stop after the step in hand (the finished stages'
/// files are kept, a download in hand is abandoned and its partial file removed, the GPU memory
/// is freed as the session drops); a second one quits at once, after removing the partial files.
pub fn stop_on_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            for p in PARTIALS.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                let _ = std::fs::remove_file(p);
            }
            std::process::exit(130);
        }
        eprintln!("\nstopping after the current step (Ctrl-C again to quit now)");
    });
}
