//! One module per report stage, each a `Stage` (see `stage/mod.rs`) in the folder of its command.
//! The registry below is the list `vram-lab run` runs in order and the CLI turns into subcommands.

pub mod anatomy;
pub mod bandwidth;
pub mod bench;
pub mod check;
pub mod estimate;
pub mod frag;
pub mod kv;
pub mod leaks;
pub mod load;
pub mod offload;
pub mod oom;
pub mod parallel;
pub mod plan;
pub mod train;

use crate::stage::{register, AnyStage};

/// Every stage, in the report's order. Adding a stage: its module, and one line here.
pub fn registry() -> Vec<Box<dyn AnyStage>> {
    vec![
        register::<anatomy::Anatomy>(),
        register::<load::Load>(),
        register::<kv::Kv>(),
        register::<frag::Frag>(),
        register::<leaks::Leaks>(),
        register::<bandwidth::Bandwidth>(),
        register::<offload::Offload>(),
        register::<bench::Bench>(),
        register::<estimate::Estimate>(),
        register::<plan::Plan>(),
        register::<train::Train>(),
        register::<parallel::Parallel>(),
        register::<check::Check>(),
    ]
}

/// The stage called `name`.
pub fn find(name: &str) -> Option<Box<dyn AnyStage>> {
    registry().into_iter().find(|s| s.name() == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn views_name_the_stages_tables() {
        for stage in super::registry() {
            let views = stage.views();
            assert!(!views.is_empty(), "{}", stage.name());
            for v in &views {
                // Table names carry the stage's name (a column name here would match no table).
                assert!(v.table.starts_with(stage.name()), "{}: view {} shows `{}`", stage.name(), v.name, v.table);
                assert!(!v.columns.is_empty());
            }
            let mut names: Vec<&str> = views.iter().map(|v| v.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), views.len(), "{}: view names repeat", stage.name());
        }
    }
}
