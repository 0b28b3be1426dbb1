//! vram-lab: GPU memory of LLM inference taken apart byte by byte.
//!
//! Data flows one way: a model source → a model on a device → a stage → tables → a run folder
//! (CSVs + manifest.json) → report.html or a notebook. `memory` measures and knows nothing of
//! stages; `estimate` holds pure formulas; `experiments` hold one report stage each, on the
//! contract of `stage`; a `session::Session` runs them.

pub mod commands;
pub mod error;
pub mod estimate;
pub mod experiments;
pub mod frame;
pub mod hw;
pub mod limits;
pub mod memory;
pub mod model;
pub mod notebook;
pub mod paths;
pub mod record;
pub mod reference;
pub mod report;
pub mod search;
pub mod session;
pub mod stage;
pub mod stop;

pub mod units;

pub use error::{LabError, Result};

/// What notebooks and examples need in one import.
pub mod prelude {
    pub use crate::error::{LabError, Result};
    pub use crate::hw::Card;
    pub use crate::memory::{CardEmulation, MemoryProbe, Snapshot, Timeline};
    pub use crate::model::{DecoderConfig, Logits, ModelSource, Precision, SourceOptions};
    pub use crate::notebook::{Mode, Setup, StageRun};
    pub use crate::report::display::{show_chart, show_columns, show_table};
    pub use crate::report::Table;
    pub use candle_core::Device;
}
