//! Free address ranges of the page allocator (`pages`): the smallest range that holds a request
//! is taken (the lowest of equals), and a range given back merges with its free neighbours, so a
//! freed layer's tensors leave one hole, not many.

use std::collections::BTreeMap;

/// One region of reserved addresses: its free ranges, start → bytes.
#[derive(Debug, Default)]
pub struct Region {
    free: BTreeMap<u64, u64>,
}

impl Region {
    pub fn new(start: u64, bytes: u64) -> Self {
        Self { free: BTreeMap::from([(start, bytes)]) }
    }

    /// The start of the smallest free range that holds `len` (the lowest of equals), taken.
    pub fn take(&mut self, len: u64) -> Option<u64> {
        let (&start, &have) = self.free.iter().filter(|(_, &b)| b >= len).min_by_key(|(&s, &b)| (b, s))?;
        self.free.remove(&start);
        if have > len {
            self.free.insert(start + len, have - len);
        }
        Some(start)
    }

    /// Gives `[start, start + len)` back, merged with free neighbours.
    pub fn put(&mut self, mut start: u64, mut len: u64) {
        if let Some((&before, &b)) = self.free.range(..start).next_back() {
            if before + b == start {
                self.free.remove(&before);
                start = before;
                len += b;
            }
        }
        if let Some(after) = self.free.remove(&(start + len)) {
            len += after;
        }
        self.free.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Best fit, lowest of equals, and neighbours merged on the way back.
    #[test]
    fn regions_take_the_best_fit_and_merge() {
        let mut r = Region::new(0, 1000);
        assert_eq!(r.take(100), Some(0));
        assert_eq!(r.take(300), Some(100));
        assert_eq!(r.take(50), Some(400));
        r.put(100, 300);
        // Free: [100, 400) of 300 and [450, 1000) of 550: 200 goes in the smaller.
        assert_eq!(r.take(200), Some(100));
        assert_eq!(r.take(600), None);
        r.put(100, 200);
        r.put(0, 100);
        r.put(400, 50);
        // Everything back in one range.
        assert_eq!(r.free, BTreeMap::from([(0, 1000)]));
    }
}
