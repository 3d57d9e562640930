//! Parsing of Kubernetes quantities and of the GPU-sharing annotations, without floating point.
//!
//! A quantity (`100m`, `2`, `8Gi`, `1.5e3`) is read exactly into an integer count of milli-units or of
//! units, rounding up as Kubernetes does (`MilliValue`, `Value`).

use thiserror::Error;

/// Why a quantity or annotation could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// Empty input.
    #[error("empty quantity")]
    Empty,
    /// Not a number with an optional suffix.
    #[error("{0:?} is not a quantity (expected a number with an optional suffix such as m, Ki, Gi)")]
    Malformed(String),
    /// Too large to count.
    #[error("{0:?} is too large")]
    Overflow(String),
    /// A GPU fraction outside (0, 1].
    #[error("gpu-fraction {0:?} must be a number greater than 0 and at most 1")]
    FractionOutOfRange(String),
    /// A count that must be positive.
    #[error("{what} {value:?} must be a whole number of at least 1")]
    NotPositive {
        /// What was being read.
        what: &'static str,
        /// The input.
        value: String,
    },
}

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

fn parse(input: &str) -> Result<Parsed, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let malformed = || QuantityError::Malformed(input.to_owned());
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split the numeric part from the suffix.
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(malformed());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let mut mantissa: u128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(c - b'0')))
            .ok_or_else(|| QuantityError::Overflow(input.to_owned()))?;
    }
    let frac_digits = i32::try_from(frac_part.len()).map_err(|_| malformed())?;
    let mut exp10 = -frac_digits;
    let mut exp2 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exp = other.strip_prefix(['e', 'E']).ok_or_else(malformed)?;
            let value: i32 = exp.parse().map_err(|_| malformed())?;
            if !(-30..=30).contains(&value) {
                return Err(QuantityError::Overflow(input.to_owned()));
            }
            exp10 += value;
        }
    }
    Ok(Parsed {
        negative,
        mantissa,
        exp10,
        exp2,
    })
}

/// `ceil(p × 10^shift)` as a signed integer (rounding away from zero is what Kubernetes does for
/// positive values; negatives round towards zero, which only matters for nonsense input).
fn scaled(p: Parsed, shift: i32, input: &str) -> Result<i64, QuantityError> {
    let overflow = || QuantityError::Overflow(input.to_owned());
    let mut value = p
        .mantissa
        .checked_shl(p.exp2)
        .filter(|v| v >> p.exp2 == p.mantissa)
        .ok_or_else(overflow)?;
    let exp = p.exp10 + shift;
    if exp >= 0 {
        for _ in 0..exp {
            value = value.checked_mul(10).ok_or_else(overflow)?;
        }
    } else {
        let mut divisor: u128 = 1;
        for _ in 0..(-exp) {
            divisor = divisor.saturating_mul(10);
        }
        value = value.div_ceil(divisor);
    }
    let value = i64::try_from(value).map_err(|_| overflow())?;
    Ok(if p.negative { -value } else { value })
}

/// The quantity in milli-units, rounded up: `100m` → 100, `2` → 2000.
///
/// # Errors
/// When the text is not a quantity or does not fit in an `i64`.
pub fn milli_value(quantity: &str) -> Result<i64, QuantityError> {
    scaled(parse(quantity)?, 3, quantity)
}

/// The quantity in whole units, rounded up: `8Gi` → 8589934592, `1500m` → 2.
///
/// # Errors
/// When the text is not a quantity or does not fit in an `i64`.
pub fn value(quantity: &str) -> Result<i64, QuantityError> {
    scaled(parse(quantity)?, 0, quantity)
}

/// A `gpu-fraction` annotation in thousandths of a GPU: `"0.5"` → 500. Accepts (0, 1].
///
/// # Errors
/// For text that is not a number, and for 0, negatives and values above 1.
pub fn gpu_fraction_milli(annotation: &str) -> Result<u32, QuantityError> {
    let parsed = parse(annotation).map_err(|_| QuantityError::FractionOutOfRange(annotation.to_owned()))?;
    if parsed.exp2 != 0 {
        return Err(QuantityError::FractionOutOfRange(annotation.to_owned()));
    }
    let milli = scaled(parsed, 3, annotation)
        .map_err(|_| QuantityError::FractionOutOfRange(annotation.to_owned()))?;
    match u32::try_from(milli) {
        Ok(m @ 1..=1000) => Ok(m),
        _ => Err(QuantityError::FractionOutOfRange(annotation.to_owned())),
    }
}

/// A positive whole count annotation (`gpu-fraction-num-devices`, `gpu-memory` in MiB).
///
/// # Errors
/// For anything but a whole number of at least 1.
pub fn positive_count(what: &'static str, annotation: &str) -> Result<u32, QuantityError> {
    match annotation.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(QuantityError::NotPositive {
            what,
            value: annotation.to_owned(),
        }),
    }
}

/// Formats milli-units as the shortest exact quantity: 500 → `500m`, 2000 → `2`.
#[must_use]
pub fn format_milli(milli: i64) -> String {
    let mut text = String::with_capacity(8);
    push_milli(&mut text, milli);
    text
}

/// Appends milli-units as [`format_milli`] formats them.
pub fn push_milli(text: &mut String, milli: i64) {
    if milli % 1000 == 0 {
        push_integer(text, milli / 1000);
    } else {
        push_integer(text, milli);
        text.push('m');
    }
}

/// Formats milli-units as a decimal number: 500 → `0.5`, 2000 → `2`, 1250 → `1.25`.
#[must_use]
pub fn format_decimal_milli(milli: i64) -> String {
    let mut text = String::with_capacity(8);
    push_decimal_milli(&mut text, milli);
    text
}

/// Appends milli-units as [`format_decimal_milli`] formats them.
pub fn push_decimal_milli(text: &mut String, milli: i64) {
    if milli < 0 {
        text.push('-');
    }
    let magnitude = milli.unsigned_abs();
    push_unsigned(text, magnitude / 1000);
    let mut frac = magnitude % 1000;
    if frac != 0 {
        text.push('.');
        // Leading zeros of the fraction (1005 → `1.005`), then its digits without trailing zeros.
        for scale in [100, 10] {
            if frac < scale {
                text.push('0');
            } else {
                break;
            }
        }
        while frac.is_multiple_of(10) {
            frac /= 10;
        }
        push_unsigned(text, frac);
    }
}

/// Appends an integer in decimal. Quantities are formatted by the thousand in every status a cycle
/// decides; this skips the formatting machinery.
pub fn push_integer(text: &mut String, value: i64) {
    if value < 0 {
        text.push('-');
    }
    push_unsigned(text, value.unsigned_abs());
}

fn push_unsigned(text: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // The remainder is below 10.
        #[allow(clippy::cast_possible_truncation)]
        let digit = (value % 10) as u8;
        digits[at] = b'0' + digit;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for d in &digits[at..] {
        text.push(char::from(*d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_milli_units_as_the_formatting_machinery_would() {
        for milli in [
            0,
            1,
            5,
            10,
            100,
            999,
            1000,
            1005,
            1050,
            1250,
            1500,
            2000,
            123_456_789,
            -1,
            -1500,
            -2000,
            i64::MAX,
            i64::MIN,
        ] {
            let expected = if milli % 1000 == 0 {
                (milli / 1000).to_string()
            } else {
                format!("{milli}m")
            };
            assert_eq!(format_milli(milli), expected, "{milli}");
            let sign = if milli < 0 { "-" } else { "" };
            let (whole, frac) = (milli.unsigned_abs() / 1000, milli.unsigned_abs() % 1000);
            let expected = if frac == 0 {
                format!("{sign}{whole}")
            } else {
                format!("{sign}{whole}.{}", format!("{frac:03}").trim_end_matches('0'))
            };
            assert_eq!(format_decimal_milli(milli), expected, "{milli}");
        }
    }

    #[test]
    fn reads_cpu_memory_and_gpu_quantities() {
        let cases: &[(&str, i64, i64)] = &[
            ("100m", 100, 1),
            ("2", 2000, 2),
            ("1.5", 1500, 2),
            ("0.1", 100, 1),
            ("8Gi", 8 * 1024 * 1024 * 1024 * 1000, 8 * 1024 * 1024 * 1024),
            ("64Gi", 64 * (1 << 30) * 1000, 64 * (1 << 30)),
            ("1k", 1_000_000, 1000),
            ("1e3", 1_000_000, 1000),
            ("1E-3", 1, 1),
            ("250M", 250_000_000_000, 250_000_000),
            ("+4", 4000, 4),
            ("1n", 1, 1),
        ];
        for (text, milli, units) in cases {
            assert_eq!(milli_value(text), Ok(*milli), "{text} milli");
            assert_eq!(value(text), Ok(*units), "{text} units");
        }
    }

    #[test]
    fn rejects_malformed_quantities() {
        for text in ["", "abc", "1..2", "1x", "Gi", ".", "1.2.3", "1e", "--1"] {
            assert!(milli_value(text).is_err(), "{text:?} should be rejected");
        }
        assert!(matches!(value("1e300"), Err(QuantityError::Overflow(_))));
        assert!(matches!(
            value("99999999999999999999999Ei"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn gpu_fraction_accepts_only_zero_to_one() {
        assert_eq!(gpu_fraction_milli("0.5"), Ok(500));
        assert_eq!(gpu_fraction_milli("1"), Ok(1000));
        assert_eq!(gpu_fraction_milli("0.25"), Ok(250));
        assert_eq!(gpu_fraction_milli(" 0.3 "), Ok(300));
        for bad in ["abc", "0", "1.5", "-1", "", "0.5Gi", "1e3"] {
            assert_eq!(
                gpu_fraction_milli(bad),
                Err(QuantityError::FractionOutOfRange(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert_eq!(
            gpu_fraction_milli("abc").map_err(|e| e.to_string()),
            Err("gpu-fraction \"abc\" must be a number greater than 0 and at most 1".to_owned())
        );
    }

    #[test]
    fn positive_counts() {
        assert_eq!(positive_count("gpu-memory", "2000"), Ok(2000));
        assert!(positive_count("gpu-memory", "0").is_err());
        assert!(positive_count("gpu-memory", "-3").is_err());
        assert!(positive_count("gpu-memory", "1.5").is_err());
    }

    #[test]
    fn formats_milli() {
        assert_eq!(format_milli(500), "500m");
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_milli(0), "0");
    }
}
