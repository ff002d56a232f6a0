//! Sizes as people write them on a command line: `4096`, `256K`, `16M`,
//! `2GiB` (powers of two; case and a space before the unit do not matter).

#![forbid(unsafe_code)]

/// Bytes that `text` names, or why it names none.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB") {
        "" | "B" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(format!("unknown unit {unit:?}; use K, M or G")),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("not a size: {text:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("too large: {text}"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("8 k"), Ok(8 << 10));
        assert!(parse_size("12T").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
