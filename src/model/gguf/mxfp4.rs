//! ggml's MXFP4 block (`block_mxfp4`, type 39): 32 values as one E8M0 scale byte and 16 bytes of
//! 4-bit E2M1 codes, the first 16 values in the low nibbles, the last 16 in the high ones. The
//! lab writes gpt-oss's experts in it (`llama-quantize`'s MXFP4_MOE); candle has no such type.

/// Values per block and bytes per block.
pub const BLOCK: usize = 32;
pub const BYTES: usize = 17;

/// The codes' values, doubled (`kvalues_mxfp4`): a scale byte `e` stands for 2^(e - 128).
const KVALUES: [f32; 16] = [0., 1., 2., 3., 4., 6., 8., 12., 0., -1., -2., -3., -4., -6., -8., -12.];

/// Half the scale byte's power of two (`ggml_e8m0_to_fp32_half`).
fn half_scale(e: u8) -> f32 {
    2f32.powi(e as i32 - 128)
}

/// The nearest code to `x` at scale `d`, the smaller magnitude on ties: what ggml's search over
/// the 16 codes finds (`best_index_mxfp4`, test `nearest_is_ggmls_search`), by the midpoints
/// between the magnitudes 0, 1, 2, 3, 4, 6, 8, 12.
fn nearest(x: f32, d: f32) -> u8 {
    const MIDPOINTS: [f32; 7] = [0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0];
    let m = x.abs() / d;
    let k = MIDPOINTS.iter().take_while(|&&t| m > t).count() as u8;
    if x < 0.0 && k > 0 {
        k + 8
    } else {
        k
    }
}

/// `values` (a whole number of blocks) as MXFP4 blocks (`quantize_row_mxfp4_ref`): each block's
/// scale puts its largest magnitude in the codes' top binade. Blocks are quantized in parallel
/// (an expert tensor of gpt-oss-20b holds 265 million values).
pub fn quantize(values: &[f32]) -> Vec<u8> {
    use rayon::prelude::*;
    values.par_chunks(BLOCK * 1024).flat_map_iter(|chunk| chunk.chunks_exact(BLOCK).flat_map(block)).collect()
}

fn block(x: &[f32]) -> [u8; BYTES] {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, 254.0) as u8 } else { 0 };
    let d = half_scale(e);
    let mut out = [0u8; BYTES];
    out[0] = e;
    for j in 0..BLOCK / 2 {
        out[1 + j] = nearest(x[j], d) | nearest(x[BLOCK / 2 + j], d) << 4;
    }
    out
}

/// The values of MXFP4 `blocks` (`dequantize_row_mxfp4`).
pub fn dequantize(blocks: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(blocks.len() / BYTES * BLOCK);
    for b in blocks.chunks_exact(BYTES) {
        let d = half_scale(b[0]);
        let qs = &b[1..];
        out.extend(qs.iter().map(|q| KVALUES[(q & 0xf) as usize] * d));
        out.extend(qs.iter().map(|q| KVALUES[(q >> 4) as usize] * d));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values on the E2M1 grid of their block's scale come back exactly; the block's bytes are
    /// its scale and then the codes, the first half of the values in the low nibbles.
    #[test]
    fn grid_values_round_trip() {
        let x: Vec<f32> = (0..32).map(|i| [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -6.0][i % 8] * 0.25).collect();
        let b = quantize(&x);
        assert_eq!(b.len(), BYTES);
        // amax 1.5 = 6 × 2^-2: floor(log2 1.5) − 2 + 127 = 125.
        assert_eq!(b[0], 125);
        assert_eq!(b[1] & 0xf, 0);
        assert_eq!(b[1] >> 4, 0);
        assert_eq!(b[2] & 0xf, 1);
        assert_eq!(dequantize(&b), x);
    }

    /// Any value lands within half its block's largest magnitude: codes step by at most a
    /// quarter of it up to the top code, 1.5 × 2^⌊log2 amax⌋, and what lies above is clamped there.
    #[test]
    fn error_is_bounded_by_the_grid() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 31.5) / 7.0).collect();
        let y = dequantize(&quantize(&x));
        for (block_x, block_y) in x.chunks(32).zip(y.chunks(32)) {
            let amax = block_x.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in block_x.iter().zip(block_y) {
                assert!((a - b).abs() <= amax / 2.0 + 1e-6, "{a} → {b} (amax {amax})");
            }
        }
        assert_eq!(quantize(&[0.0; 32])[0], 0);
    }

    /// The midpoint rule picks what ggml's loop picks: the first code of least error.
    #[test]
    fn nearest_is_ggmls_search() {
        let ggml = |x: f32, d: f32| {
            let err = |i: usize| (KVALUES[i] * d - x).abs();
            (1..16).fold(0, |best, i| if err(i) < err(best) { i } else { best }) as u8
        };
        for i in -3000..3000 {
            let x = i as f32 / 200.0;
            for d in [0.5f32, 1.0, 0.125] {
                assert_eq!(nearest(x, d), ggml(x, d), "x {x} d {d}");
            }
        }
    }
}
