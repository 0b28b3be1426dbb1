//! Units and the way the lab writes numbers: bytes in GiB / MiB, counts with thousands separators.
//! The bottom of the house: it imports nothing of the lab.

pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
pub const MIB: f64 = 1024.0 * 1024.0;

pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB
}

/// 1.50 GiB, 12.00 MiB or 512 B.
pub fn fmt_bytes(bytes: u64) -> String {
    if bytes as f64 >= GIB {
        format!("{:.2} GiB", gib(bytes))
    } else if bytes as f64 >= MIB {
        format!("{:.2} MiB", mib(bytes))
    } else {
        format!("{bytes} B")
    }
}

/// 152064 → "152,064": the way the lab's messages write counts.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(152_064), "152,064");
        assert_eq!(grouped(999_999_999), "999,999,999");
    }

    #[test]
    fn bytes_in_the_unit_that_fits() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(12 << 20), "12.00 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
    }
}
