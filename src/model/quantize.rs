//! Quantizing a dense matrix to GGUF blocks with candle's quantizers, rows in parallel: for the
//! lab's Q4 load of a dense checkpoint and for the GGUF writer (`gguf::writer`).

use crate::error::Result;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

/// `t` (a CPU matrix, any float dtype) quantized to `q` on `device`, rows in parallel: candle's
/// k-quant quantizer runs on one thread (7.6 B weights took 4.4 minutes on the H200 machine's
/// CPU); blocks never span rows, so quantizing row chunks apart and joining their bytes gives the
/// same blocks.
pub fn quantize_rows(t: &Tensor, q: GgmlDType, device: &Device) -> Result<QTensor> {
    use rayon::prelude::*;
    let t = t.to_device(&Device::Cpu)?.to_dtype(candle_core::DType::F32)?;
    let (rows, cols) = match t.dims() {
        [r, c] => (*r, *c),
        _ => return Ok(QTensor::quantize_onto(&t, q, device)?),
    };
    let chunk = 64.min(rows.max(1));
    let parts: Vec<Vec<u8>> = (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|i| {
            let n = chunk.min(rows - i * chunk);
            // A compact copy: candle quantizes a view's whole storage, not its rows.
            Ok(QTensor::quantize(&t.narrow(0, i * chunk, n)?.force_contiguous()?, q)?.data()?.into_owned())
        })
        .collect::<Result<_>>()?;
    let storage = candle_core::quantized::QStorage::from_data(std::borrow::Cow::Owned(parts.concat()), device, q)?;
    Ok(QTensor::new(storage, (rows, cols))?)
}

#[cfg(test)]
mod row_tests {
    use super::*;

    /// Row chunks quantized in parallel make the bytes one pass makes, for a row count that
    /// is not a multiple of the chunk.
    #[test]
    fn parallel_rows_give_the_same_blocks() {
        let t = Tensor::randn(0f32, 0.02, (130, 512), &Device::Cpu).unwrap();
        for q in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0] {
            let one = QTensor::quantize(&t, q).unwrap();
            let par = quantize_rows(&t, q, &Device::Cpu).unwrap();
            assert_eq!(par.shape().dims(), [130, 512]);
            assert_eq!(par.data().unwrap(), one.data().unwrap(), "{q:?}");
        }
    }
}
