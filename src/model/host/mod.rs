//! The CPU path of an offloaded layer: its products and its attention, computed from host memory.

pub mod attention;
pub mod linear;
