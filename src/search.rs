//! Bisection: the largest size that passes a trial, found by halving. The KV stage uses it for the
//! longest context that fits, the allocator stage for the largest block that can be allocated.

use crate::error::Result;

/// Narrows [fits, does_not_fit) to within `resolution` by halving; returns the largest size seen
/// to fit and the sizes tried. Trials stay on the resolution grid, strictly between the bounds.
pub fn bisect(
    mut lo: u64,
    mut hi: u64,
    resolution: u64,
    mut fits: impl FnMut(u64) -> Result<bool>,
) -> Result<(u64, Vec<u64>)> {
    let mut tried = Vec::new();
    let resolution = resolution.max(1);
    while hi > lo + resolution {
        let mid = (lo + (hi - lo) / 2) / resolution * resolution;
        let mid = if mid <= lo { lo + resolution } else { mid };
        if mid >= hi {
            break;
        }
        tried.push(mid);
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, tried))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisection_finds_the_boundary_on_the_grid() {
        for limit in [1024u64, 1300, 2047, 4095] {
            let (found, tried) = bisect(1024, 4096, 256, |n| Ok(n <= limit)).unwrap();
            assert!(found <= limit && limit - found < 256, "limit {limit}: found {found}");
            assert!(tried.iter().all(|n| n % 256 == 0 && *n > 1024 && *n < 4096));
            assert!(tried.len() <= 4, "{tried:?}");
        }
        // Already within the resolution: nothing to try.
        assert_eq!(bisect(1024, 1200, 256, |_| unreachable!()).unwrap(), (1024, vec![]));
    }
}
