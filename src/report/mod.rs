//! Output: run folders (manifest, CSVs), report.html, charts, and the tables as the console and
//! the notebooks show them.

pub mod charts;
pub mod display;
pub mod env;
pub mod format;
pub mod html;
pub mod manifest;
pub mod table;

pub use env::Env;
pub use format::{console_columns, console_table};
pub use manifest::{Manifest, RunFolder};
pub use table::Table;
