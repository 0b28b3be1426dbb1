//! Rendering any stage's declared views, never a stage by name: report.html from a run folder, the
//! declared charts drawn with plotly, and tables as the notebooks show them.

pub mod chart;
pub mod display;
pub mod html;
pub mod json;
pub mod prepare;
pub mod svg;
pub mod table;

pub use table::Table;
