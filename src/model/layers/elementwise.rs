//! A layer's element-wise ops and its RMS norm: the lab's kernels for BF16 on a GPU
//! (`kernels::elementwise`, eight values a thread, the same bits), candle's elsewhere. Each frees
//! or keeps its inputs as the candle call it replaces: the adds, product and copies take them by
//! value (freed once the result exists, as with `a + b`), silu and the norm borrow them. So the
//! moments the ledger counts stay.

use crate::error::Result;
use candle_core::Tensor;

/// a + b (the same shape).
pub fn add(a: Tensor, b: Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::add(&a, &b)? {
        return Ok(y);
    }
    Ok((a + b)?)
}

/// a · b (the same shape).
pub fn mul(a: Tensor, b: Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::mul(&a, &b)? {
        return Ok(y);
    }
    Ok((a * b)?)
}

/// silu(x) = x / (1 + e^−x) (a new tensor: x stays).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::silu(x)? {
        return Ok(y);
    }
    Ok(candle_nn::ops::silu(x)?)
}

/// x + bias, the bias [cols] added to every row of x [.., cols].
pub fn bias_add(x: Tensor, bias: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::bias_add(&x, bias)? {
        return Ok(y);
    }
    Ok(x.broadcast_add(bias)?)
}

/// RMS norm of x [.., cols] by w [cols] (candle's fused kernel's bits).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::rms_norm(x, w, eps)? {
        return Ok(y);
    }
    Ok(candle_nn::ops::rms_norm(x, w, eps)?)
}

/// x [b, s, n · d] as [b, n, s, d], contiguous (the heads first, as attention takes them).
pub fn heads_first(x: Tensor, n: usize, d: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::elementwise::heads_first(&x, n, d)? {
        return Ok(y);
    }
    let (b, s, _) = x.dims3()?;
    Ok(x.reshape((b, s, n, d))?.transpose(1, 2)?.contiguous()?)
}

/// x contiguous: where x [b, n, s, d] is the heads-first view of contiguous [b, s, n, d] rows (v
/// as a layer hands it to the cache), a heads-first copy (the lab's kernel where it runs: candle's
/// strided copy took 0.17 ms a layer at 32k tokens on an H200, the lab's copy of k, the same
/// shape, 0.02; data/results/h200/2026-11-28-prefill-parity, run-3's layers); else `contiguous`.
pub fn contiguous(x: &Tensor) -> Result<Tensor> {
    if x.rank() == 4 && !x.is_contiguous() {
        let rows = x.transpose(1, 2)?;
        if rows.is_contiguous() {
            let (b, s, n, d) = rows.dims4()?;
            return heads_first(rows.reshape((b, s, n * d))?, n, d);
        }
    }
    Ok(x.contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A heads-first view made contiguous holds its own elements; a view of another kind too.
    #[test]
    fn contiguous_keeps_the_elements() {
        let x = Tensor::arange(0f32, 2.0 * 3.0 * 32.0, &Device::Cpu).unwrap().reshape((2, 3, 4, 8)).unwrap();
        for view in [x.transpose(1, 2).unwrap(), x.transpose(2, 3).unwrap(), x.clone()] {
            let y = contiguous(&view).unwrap();
            assert!(y.is_contiguous());
            assert_eq!(y.dims(), view.dims());
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(flat(&y), flat(&view.contiguous().unwrap()));
        }
    }

    /// The heads-first copy puts element (b, s, n, d) at (b, n, s, d) (on the CPU, candle's ops).
    #[test]
    fn heads_first_moves_each_element() {
        let x = Tensor::arange(0f32, 2.0 * 3.0 * 32.0, &Device::Cpu).unwrap().reshape((2, 3, 32)).unwrap();
        let y = heads_first(x.clone(), 4, 8).unwrap();
        assert_eq!(y.dims(), &[2, 4, 3, 8]);
        let (xv, yv) = (x.to_vec3::<f32>().unwrap(), y.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        for (bi, rows) in xv.iter().enumerate() {
            for (si, row) in rows.iter().enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    assert_eq!(yv[((bi * 4 + c / 8) * 3 + si) * 8 + c % 8], v);
                }
            }
        }
    }
}
