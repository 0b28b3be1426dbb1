//! Every ggml tensor type a GGUF file may hold: its id in the file, its name, and its block
//! arithmetic (values per block, bytes per block), as ggml's `type_traits` table has them. A file is
//! priced from this table alone, so types the lab does not compute (the IQ and ternary families)
//! are priced all the same.

use candle_core::quantized::GgmlDType;

/// One ggml type: `block` values stored in `bytes` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub bytes: u64,
}

const fn t(id: u32, name: &'static str, block: u64, bytes: u64) -> GgmlType {
    GgmlType { id, name, block, bytes }
}

/// ggml's `enum ggml_type` with `type_traits[].blck_size` and `.type_size`. Ids 4-5 (Q4_2, Q4_3),
/// 31-33 (Q4_0_4_4 …) and 36-38 (IQ4_NL_4_4 …) were removed from ggml and are absent here.
pub const TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 36),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
];

impl GgmlType {
    pub fn from_id(id: u32) -> Option<Self> {
        TYPES.iter().copied().find(|t| t.id == id)
    }

    pub fn from_name(name: &str) -> Option<Self> {
        TYPES.iter().copied().find(|t| t.name.eq_ignore_ascii_case(name))
    }

    /// Bytes of `elems` values, or None when they do not fill whole blocks (ggml refuses such a
    /// tensor) or pass u128 (a forged shape whose element count saturated: the fuzzer's first
    /// GGUF find, fuzz/regressions/gguf).
    pub fn bytes_of(self, elems: u128) -> Option<u128> {
        elems
            .is_multiple_of(self.block as u128)
            .then(|| (elems / self.block as u128).checked_mul(self.bytes as u128))?
    }

    /// Bits per value, as llama.cpp's tables print them (Q4_K: 4.5).
    pub fn bits_per_value(self) -> f64 {
        self.bytes as f64 * 8.0 / self.block as f64
    }

    /// The type as candle computes it, where it does (its quantized matmul and dequantizers).
    pub fn candle(self) -> Option<GgmlDType> {
        Some(match self.name {
            "F32" => GgmlDType::F32,
            "F16" => GgmlDType::F16,
            "BF16" => GgmlDType::BF16,
            "Q4_0" => GgmlDType::Q4_0,
            "Q4_1" => GgmlDType::Q4_1,
            "Q5_0" => GgmlDType::Q5_0,
            "Q5_1" => GgmlDType::Q5_1,
            "Q8_0" => GgmlDType::Q8_0,
            "Q8_1" => GgmlDType::Q8_1,
            "Q2_K" => GgmlDType::Q2K,
            "Q3_K" => GgmlDType::Q3K,
            "Q4_K" => GgmlDType::Q4K,
            "Q5_K" => GgmlDType::Q5K,
            "Q6_K" => GgmlDType::Q6K,
            "Q8_K" => GgmlDType::Q8K,
            _ => return None,
        })
    }

    /// The table's entry for one of candle's types.
    pub fn of(d: GgmlDType) -> Self {
        // Every candle type is in the table (test `candle_types_agree`).
        TYPES.iter().copied().find(|t| t.candle() == Some(d)).unwrap_or(TYPES[0])
    }

    /// Whether values are stored in blocks with scales (not plain floats or integers).
    pub fn is_block_quantized(self) -> bool {
        self.block > 1
    }
}

/// Tensor count and bytes per type name, largest first: the summary of a file's tensors.
pub fn tally(tensors: impl IntoIterator<Item = (String, u64)>) -> Vec<(String, usize, u64)> {
    let mut by: Vec<(String, usize, u64)> = vec![];
    for (name, bytes) in tensors {
        match by.iter_mut().find(|(n, _, _)| *n == name) {
            Some(e) => {
                e.1 += 1;
                e.2 += bytes;
            }
            None => by.push((name, 1, bytes)),
        }
    }
    by.sort_by_key(|e| std::cmp::Reverse(e.2));
    by
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// candle's block arithmetic and ggml's agree on every type candle has.
    #[test]
    fn candle_types_agree() {
        for t in TYPES {
            if let Some(d) = t.candle() {
                assert_eq!((d.block_size() as u64, d.type_size() as u64), (t.block, t.bytes), "{}", t.name);
                assert_eq!(GgmlType::of(d), *t);
            }
        }
    }

    /// Ids are unique and the bits per value are llama.cpp's figures.
    #[test]
    fn ids_and_bits() {
        let mut ids: Vec<u32> = TYPES.iter().map(|t| t.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), TYPES.len());
        let bits = |n| GgmlType::from_name(n).unwrap().bits_per_value();
        assert_eq!(bits("Q4_K"), 4.5);
        assert_eq!(bits("Q6_K"), 6.5625);
        assert_eq!(bits("Q8_0"), 8.5);
        assert_eq!(bits("IQ2_XXS"), 2.0625);
        assert_eq!(bits("IQ4_XS"), 4.25);
        assert_eq!(bits("MXFP4"), 4.25);
        assert_eq!(GgmlType::from_name("q4_k").unwrap().bytes_of(512), Some(288));
        assert_eq!(GgmlType::from_name("Q4_K").unwrap().bytes_of(100), None);
        assert!(GgmlType::from_id(4).is_none());
    }
}
