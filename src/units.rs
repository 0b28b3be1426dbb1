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

/// A byte unit that fits the magnitude: `unit` (GiB, MiB or KiB) stepped down while the largest
/// value is below 1 in it; returns the unit and the factor to multiply the values by. Other units
/// come back as they are. A scaled card's figures (3.27 MiB of weights) read in MiB, not as
/// 0.00319 GiB.
pub fn fitting(unit: &str, largest: f64) -> (String, f64) {
    const STEPS: [&str; 4] = ["GiB", "MiB", "KiB", "B"];
    let Some(mut i) = STEPS.iter().position(|u| *u == unit) else { return (unit.to_string(), 1.0) };
    let mut factor = 1.0;
    while i + 1 < STEPS.len() && largest > 0.0 && largest * factor < 1.0 {
        factor *= 1024.0;
        i += 1;
    }
    (STEPS[i].to_string(), factor)
}

/// 152064 → "152,064": the way the lab's messages write counts.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn units_fit_their_magnitude() {
        assert_eq!(super::fitting("GiB", 14.2), ("GiB".to_string(), 1.0));
        assert_eq!(super::fitting("GiB", 0.00319), ("MiB".to_string(), 1024.0));
        assert_eq!(super::fitting("MiB", 0.0695), ("KiB".to_string(), 1024.0));
        assert_eq!(super::fitting("MiB", 0.0), ("MiB".to_string(), 1.0));
        assert_eq!(super::fitting("tok/s", 0.5), ("tok/s".to_string(), 1.0));
    }

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
