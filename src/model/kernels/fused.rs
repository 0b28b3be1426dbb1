//! What the step's matrix-vector kernel is asked: the weights of a product and what it fuses.

use candle_core::quantized::QTensor;
use candle_core::Tensor;

/// The weights of one part of a product: a dense matrix [n, k], or GGUF blocks of the same shape.
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    Dense(&'a Tensor),
    Quant(&'a QTensor),
}

/// One weight of a product and its bias.
pub type Part<'a> = (Weights<'a>, Option<&'a Tensor>);

/// What the step's matrix-vector kernel computes besides the product: the RMS norm of x before it
/// (its weight and eps), and after it the residual, or silu(gate)·up of the gate and up weights.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fused<'a> {
    pub norm: Option<(&'a Tensor, f32)>,
    pub res: Option<&'a Tensor>,
    pub glu: bool,
}
