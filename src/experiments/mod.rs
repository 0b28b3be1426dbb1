//! One module per report stage, each a `Stage` (see `stage.rs`). The registry below is the list
//! `vram-lab run` runs in order and the CLI turns into subcommands.

pub mod anatomy;
pub mod kv;

use crate::stage::{register, AnyStage};

/// Every stage, in the report's order. Adding a stage: its module, and one line here.
pub fn registry() -> Vec<Box<dyn AnyStage>> {
    vec![register::<anatomy::Anatomy>(), register::<kv::KvCache>()]
}

/// The stage called `name`.
pub fn find(name: &str) -> Option<Box<dyn AnyStage>> {
    registry().into_iter().find(|s| s.name() == name)
}
