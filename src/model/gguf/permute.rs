//! llama.cpp's row order for a Llama q or k projection. Its converter (convert_hf_to_gguf.py,
//! `LlamaModel.permute`) reorders each head's rows so llama.cpp's RoPE can rotate adjacent
//! pairs where transformers rotates the two halves of a head:
//! `w.reshape(heads, 2, d / 2, cols).swapaxes(1, 2).reshape(rows, cols)`.
//! Row `h·d + 2j + i` of the file is row `h·d + i·d/2 + j` of the checkpoint (i in 0..2, j in
//! 0..d/2). Whole rows move, so a block-quantized matrix is reordered in its bytes.

use crate::error::{LabError, Result};

/// For each row of the file, the checkpoint's row it holds (`rows` rows in `heads` heads).
pub fn file_to_checkpoint(rows: usize, heads: usize) -> Result<Vec<usize>> {
    if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        return Err(LabError::input(format!("{rows} rows do not split into {heads} heads of an even size")));
    }
    let d = rows / heads;
    let mut order = Vec::with_capacity(rows);
    for h in 0..heads {
        for j in 0..d / 2 {
            for i in 0..2 {
                order.push(h * d + i * d / 2 + j);
            }
        }
    }
    Ok(order)
}

/// `bytes` (rows of equal size) reordered so row `r` of the result is row `order[r]` of `bytes`.
pub fn reorder_rows(bytes: &[u8], order: &[usize]) -> Result<Vec<u8>> {
    let rows = order.len();
    if rows == 0 || !bytes.len().is_multiple_of(rows) {
        return Err(LabError::input(format!("{} bytes do not split into {rows} rows", bytes.len())));
    }
    let row = bytes.len() / rows;
    let mut out = Vec::with_capacity(bytes.len());
    for &r in order {
        out.extend_from_slice(&bytes[r * row..(r + 1) * row]);
    }
    Ok(out)
}

/// The inverse of a reordering: `inverse(o)[o[r]] = r`.
pub fn inverse(order: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; order.len()];
    for (r, &o) in order.iter().enumerate() {
        inv[o] = r;
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One head of 4 rows: the file holds rows 0, 2, 1, 3 of the checkpoint, as
    /// `np.arange(4).reshape(1, 2, 2).swapaxes(1, 2).reshape(4)` = [0, 2, 1, 3]; two heads of
    /// 6 rows each: [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11].
    #[test]
    fn the_converters_order() {
        assert_eq!(file_to_checkpoint(4, 1).unwrap(), vec![0, 2, 1, 3]);
        assert_eq!(file_to_checkpoint(12, 2).unwrap(), vec![0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
        assert!(file_to_checkpoint(6, 4).is_err() && file_to_checkpoint(6, 2).is_err());
    }

    #[test]
    fn rows_move_whole_and_back() {
        let bytes: Vec<u8> = (0..24).collect();
        let order = file_to_checkpoint(4, 1).unwrap();
        let moved = reorder_rows(&bytes, &order).unwrap();
        assert_eq!(&moved[6..12], &bytes[12..18]);
        assert_eq!(reorder_rows(&moved, &inverse(&order)).unwrap(), bytes);
    }
}
