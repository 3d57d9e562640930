//! Parsing of human-written durations for flags and environment variables (`15s`, `1m`, `500ms`, `1m30s`).
//!
//! Owns the grammar only (Go's `time.ParseDuration` without signs, so flags read as they do in KAI and
//! client-go). Must not: know which flag uses it.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input was empty or only whitespace.
    #[error("empty duration")]
    Empty,
    /// A number was expected at the given byte offset.
    #[error("expected a number at offset {offset} in {input:?}")]
    ExpectedNumber {
        /// The whole input.
        input: String,
        /// Byte offset of the problem.
        offset: usize,
    },
    /// A number had no unit (only a lone `0` may omit it).
    #[error("missing unit after {number:?} in {input:?} (use ns, us, ms, s, m or h)")]
    MissingUnit {
        /// The whole input.
        input: String,
        /// The number that lacked a unit.
        number: String,
    },
    /// The unit is not one of `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`.
    #[error("unknown unit {unit:?} in {input:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unrecognised unit.
        unit: String,
    },
    /// The value does not fit in a [`Duration`].
    #[error("duration {input:?} is too large")]
    Overflow {
        /// The whole input.
        input: String,
    },
}

/// Parses `15s`, `1m`, `500ms`, `1.5s`, `1h30m` or a bare `0` into a [`Duration`].
///
/// Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`; components add up. Signs are rejected: every
/// duration this crate reads is a length of time.
pub fn parse(input: &str) -> Result<Duration, Error> {
    let text = input.trim();
    if text.is_empty() {
        return Err(Error::Empty);
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let overflow = || Error::Overflow {
        input: input.to_owned(),
    };
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut total_nanos: u128 = 0;
    while pos < bytes.len() {
        let start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let whole = &text[start..pos];
        let mut fraction = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let fraction_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            fraction = &text[fraction_start..pos];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(Error::ExpectedNumber {
                input: input.to_owned(),
                offset: start,
            });
        }
        let unit_start = pos;
        while pos < bytes.len() && !bytes[pos].is_ascii_digit() && bytes[pos] != b'.' {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        if unit.is_empty() {
            return Err(Error::MissingUnit {
                input: input.to_owned(),
                number: text[start..pos].to_owned(),
            });
        }
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            _ => {
                return Err(Error::UnknownUnit {
                    input: input.to_owned(),
                    unit: unit.to_owned(),
                });
            }
        };
        let whole_value: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut component = whole_value.checked_mul(nanos_per_unit).ok_or_else(overflow)?;
        if !fraction.is_empty() {
            // Digits past nanosecond precision cannot change the result; dropping them keeps 10^n small.
            let significant = &fraction[..fraction.len().min(18)];
            let numerator: u128 = significant.parse().map_err(|_| overflow())?;
            let denominator = 10u128.pow(u32::try_from(significant.len()).map_err(|_| overflow())?);
            component = component
                .checked_add(numerator.checked_mul(nanos_per_unit).ok_or_else(overflow)? / denominator)
                .ok_or_else(overflow)?;
        }
        total_nanos = total_nanos.checked_add(component).ok_or_else(overflow)?;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| overflow())?;
    let nanos = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| overflow())?;
    Ok(Duration::new(secs, nanos))
}

/// Formats a duration the way [`parse`] reads it back (`15s`, `1m30s`, `500ms`), for help texts and logs.
pub fn format(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    let nanos = duration.subsec_nanos();
    if nanos != 0 {
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", duration.as_millis())
        } else if nanos.is_multiple_of(1_000) {
            format!("{}us", duration.as_micros())
        } else {
            format!("{}ns", duration.as_nanos())
        };
    }
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3_600, (secs % 3_600) / 60, secs % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 {
        out.push_str(&format!("{seconds}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_units() {
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
    }

    #[test]
    fn parses_compound_and_fractional_values() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3s4ms"), Ok(Duration::from_millis(3_723_004)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0.25m"), Ok(Duration::from_secs(15)));
        // More fractional digits than nanosecond precision truncate instead of failing.
        assert_eq!(parse("1.0000000001s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("0.0000000000000000000001h"), Ok(Duration::ZERO));
    }

    #[test]
    fn accepts_zero_and_surrounding_whitespace() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse(" 10s \n"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn rejects_malformed_input() {
        assert_eq!(parse(""), Err(Error::Empty));
        assert_eq!(parse("  "), Err(Error::Empty));
        assert!(matches!(parse("15"), Err(Error::MissingUnit { number, .. }) if number == "15"));
        assert!(matches!(parse("1m30"), Err(Error::MissingUnit { number, .. }) if number == "30"));
        assert!(matches!(parse("15sec"), Err(Error::UnknownUnit { unit, .. }) if unit == "sec"));
        assert!(matches!(parse("5d"), Err(Error::UnknownUnit { unit, .. }) if unit == "d"));
        assert!(matches!(
            parse("-5s"),
            Err(Error::ExpectedNumber { offset: 0, .. })
        ));
        assert!(matches!(parse("s"), Err(Error::ExpectedNumber { offset: 0, .. })));
        assert!(matches!(parse("1..5s"), Err(Error::MissingUnit { number, .. }) if number == "1."));
    }

    #[test]
    fn rejects_overflow() {
        assert!(matches!(
            parse("99999999999999999999999999999999999999999h"),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            parse("9999999999999999999h"),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn format_round_trips_through_parse() {
        for text in [
            "0s", "15s", "1m", "1m30s", "2h", "1h0m5s", "500ms", "250us", "7ns", "1500ms",
        ] {
            let parsed = parse(text).expect("valid duration");
            assert_eq!(parse(&format(parsed)), Ok(parsed), "{text}");
        }
        assert_eq!(format(Duration::from_secs(15)), "15s");
        assert_eq!(format(Duration::from_secs(3_605)), "1h5s");
        assert_eq!(format(Duration::from_millis(500)), "500ms");
        assert_eq!(format(Duration::from_millis(1_500)), "1500ms");
    }
}
