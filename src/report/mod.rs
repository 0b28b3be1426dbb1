//! Output: the run folder (one CSV per table, env.json, console.txt) and the console log.

pub mod charts;
pub mod display;
pub mod env;
pub mod output;
pub mod table;

pub use env::Env;
pub use output::{Console, OutputDir};
pub use table::Table;
