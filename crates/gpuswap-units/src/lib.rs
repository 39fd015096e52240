//! gpuswap-units: sizes and durations written by people: `"100MiB"`, `"1.5GB"`, `"20s"`,
//! `"250us"`. The simulator, the CLI and the interposer read them alike.

use thiserror::Error;

/// A size or duration that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{found:?} is not a {what}; expected {expected}")]
pub struct UnitError {
    /// What was given.
    pub found: String,
    /// "size" or "duration".
    pub what: &'static str,
    /// The accepted forms.
    pub expected: &'static str,
}

const SIZE_FORMS: &str =
    "a number with a unit: B, KiB, MiB, GiB, TiB (powers of 2) or KB, MB, GB, TB (powers of 10)";
const TIME_FORMS: &str = "a number with a unit: ns, us, ms or s";

const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

const TIME_UNITS: &[(&str, u64)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

/// Parses a size into bytes. Fractions are allowed when the result is a whole number of
/// bytes (`"1.5GiB"`), never for bare bytes.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    parse_with_units(text, SIZE_UNITS).ok_or_else(|| UnitError {
        found: text.to_owned(),
        what: "size",
        expected: SIZE_FORMS,
    })
}

/// The longest duration a scenario or flag may give: 2^62 ns, about 146 years. Starts
/// and limits this far from `u64::MAX` leave the simulated clock room to add any
/// event's duration without wrapping (`--max-sim-time 18446744073709551615ns` once
/// wrapped a tenant's copy past the end of time).
pub const MAX_DURATION_NS: u64 = 1 << 62;

/// Parses a duration into nanoseconds, at most [`MAX_DURATION_NS`].
pub fn parse_ns(text: &str) -> Result<u64, UnitError> {
    let error = |expected| UnitError {
        found: text.to_owned(),
        what: "duration the simulated clock can hold",
        expected,
    };
    match parse_with_units(text, TIME_UNITS) {
        Some(ns) if ns <= MAX_DURATION_NS => Ok(ns),
        Some(_) => Err(error(
            "at most 4611686018s (2^62 ns, about 146 years of simulated time)",
        )),
        None => Err(UnitError {
            what: "duration",
            ..error(TIME_FORMS)
        }),
    }
}

fn parse_with_units(text: &str, units: &[(&str, u64)]) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    let scale = units.iter().find(|(name, _)| *name == unit)?.1;
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) || (number.contains('.') && frac.is_empty()) {
        return None;
    }
    // Exact integer arithmetic: value = (whole * 10^k + frac) * scale / 10^k, every step
    // checked: a number past u128 is refused, never wrapped into a small one.
    let digits = u32::try_from(frac.len()).ok()?;
    let denom = 10u128.checked_pow(digits)?;
    let frac = if frac.is_empty() {
        0
    } else {
        frac.parse::<u128>().ok()?
    };
    let numer = whole
        .parse::<u128>()
        .ok()?
        .checked_mul(denom)?
        .checked_add(frac)?;
    let scaled = numer.checked_mul(u128::from(scale))?;
    if scaled % denom != 0 {
        return None;
    }
    u64::try_from(scaled / denom).ok()
}

/// Formats bytes with the largest binary unit that keeps at least one whole unit.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    let (name, scale) = UNITS
        .iter()
        .find(|(_, scale)| bytes >= *scale)
        .copied()
        .unwrap_or(("B", 1));
    if scale == 1 {
        format!("{bytes} B")
    } else {
        format!("{:.1} {name}", bytes as f64 / scale as f64)
    }
}

/// Formats nanoseconds as seconds, milliseconds or microseconds.
pub fn format_ns(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.3} ms", n as f64 / 1e6),
        n => format!("{:.1} us", n as f64 / 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_in_binary_and_decimal_units() {
        assert_eq!(parse_bytes("100MiB"), Ok(100 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_bytes(" 7 B "), Ok(7));
        assert_eq!(parse_bytes("4 KiB"), Ok(4096));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        for bad in [
            "",
            "MiB",
            "10",
            "10 mib",
            "1.5B",
            "-3MiB",
            "1e3MB",
            "1.MiB",
            "99999999999TiB",
            // Past u128 on the way, not only at the end: refused, neither a panic nor a
            // number wrapped into a small one.
            "100000000000000000000000000000000000000.0B",
            "4.40282366920938463463374607431768211456B",
            "340282366920938463463374607431768211455.5KiB",
        ] {
            let err = parse_bytes(bad).unwrap_err();
            assert_eq!(err.found, bad, "{bad:?} must be rejected");
            assert!(err.to_string().contains("MiB"), "{err}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_ns("0s"), Ok(0));
        assert_eq!(parse_ns("20s"), Ok(20_000_000_000));
        assert_eq!(parse_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_ns("250us"), Ok(250_000));
        assert!(parse_ns("3 min").is_err());
        assert!(parse_ns("1.5ns").is_err());
        assert_eq!(parse_ns("4611686018427387904ns"), Ok(MAX_DURATION_NS));
        let past = parse_ns("4611686018427387905ns").unwrap_err();
        assert!(past.to_string().contains("at most 4611686018s"), "{past}");
        assert!(parse_ns("18446744073709551615ns").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 19), "1.5 MiB");
        assert_eq!(format_ns(1_500_000_000), "1.500 s");
        assert_eq!(format_ns(2_500), "2.5 us");
    }

    proptest! {
        #[test]
        fn bytes_round_trip(n in 0u64..1 << 50) {
            prop_assert_eq!(parse_bytes(&format!("{n}B")), Ok(n));
            prop_assert_eq!(parse_bytes(&format!("{n}KiB")), Ok(n << 10));
        }
    }
}
