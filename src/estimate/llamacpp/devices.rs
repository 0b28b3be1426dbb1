//! Where llama.cpp puts each layer over several GPUs (`--split-mode layer`; llama-model.cpp,
//! `load_tensors`): of `layers` + 1 slots (the last the output layer), the last `-ngl` are on
//! the GPUs, slot `i` of those on the first GPU whose cumulative share of `-ts` (normalised,
//! summed in f32 as llama.cpp sums them) exceeds `i / (-ngl)`; the rest, and the token
//! embedding, in host memory. Without `-ts` the shares are each GPU's free memory.

use crate::error::{LabError, Result};

/// The shares' running sums over their total, in f32 as llama.cpp adds them.
fn cumulative(shares: &[f64]) -> Result<Vec<f32>> {
    if shares.is_empty() || shares.iter().any(|s| !s.is_finite() || *s < 0.0) || shares.iter().sum::<f64>() <= 0.0 {
        return Err(LabError::input(format!("a split of {shares:?}: each share at least 0, not all 0")));
    }
    let sum: f32 = shares.iter().map(|&s| s as f32).sum();
    // 1e300 is finite here and infinite there (every layer would land on one card), so the split
    // must hold in f32 too.
    if !sum.is_finite() || sum <= 0.0 {
        return Err(LabError::input(format!(
            "a split of {shares:?}: its sum is not a finite positive f32 (llama.cpp adds the shares in f32)"
        )));
    }
    let mut acc = 0f32;
    Ok(shares
        .iter()
        .map(|&s| {
            acc += s as f32;
            acc / sum
        })
        .collect())
}

/// Each slot's GPU (`layers` repeating layers, then the output layer), None for the host, with
/// `ngl` slots on the GPUs (`-ngl`, at most `layers` + 1) split by `shares`.
pub fn layer_devices(layers: usize, ngl: usize, shares: &[f64]) -> Result<Vec<Option<usize>>> {
    let cumulative = cumulative(shares)?;
    let act = ngl.min(layers + 1);
    let start = layers + 1 - act;
    Ok((0..=layers)
        .map(|il| {
            let slot = il.checked_sub(start)?;
            let x = slot as f32 / act as f32;
            Some(cumulative.iter().position(|&c| c > x).unwrap_or(shares.len() - 1))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen2.5-7B's 28 layers and the output over two equal GPUs: slots below 14.5 on the first;
    /// `-ngl 10` puts layers 19..27 and the output on the GPUs, 5 slots each.
    #[test]
    fn layers_by_share_and_ngl() {
        let d = layer_devices(28, 29, &[1.0, 1.0]).unwrap();
        assert_eq!(d.iter().filter(|&&g| g == Some(0)).count(), 15);
        assert_eq!(d[28], Some(1));
        let part = layer_devices(28, 10, &[1.0, 1.0]).unwrap();
        assert!(part[..19].iter().all(Option::is_none));
        assert_eq!(part[19..].iter().filter(|&&g| g == Some(0)).count(), 5);
        assert_eq!(layer_devices(28, 0, &[1.0, 1.0]).unwrap(), vec![None; 29]);
        assert!(layer_devices(4, 5, &[1.0, -1.0]).is_err());
    }
}
