//! vram-lab: GPU memory of LLM inference taken apart byte by byte.
//!
//! Data flows one way: a model source → a model on a device → an experiment → tables → the
//! output folder or a notebook. `memory` measures and knows nothing of experiments; `estimate`
//! holds pure formulas; `experiments` hold one report stage each.

pub mod device;
pub mod error;
pub mod estimate;
pub mod experiments;
pub mod memory;
pub mod model;
pub mod notebook;
pub mod reference;
pub mod report;

pub use error::{LabError, Result};

/// What notebooks and examples need in one import.
pub mod prelude {
    pub use crate::error::{LabError, Result};
    pub use crate::experiments::{anatomy, Lab};
    pub use crate::memory::{Card, CardEmulation, MemoryProbe, Snapshot, Timeline};
    pub use crate::model::{Logits, ModelSource, Precision, Qwen2Config, SourceOptions};
    pub use crate::notebook::{check_answer, Mode, Setup};
    pub use crate::report::Table;
    pub use crate::report::{charts, display::{show_chart, show_columns, show_table}};
    pub use candle_core::Device;
}
