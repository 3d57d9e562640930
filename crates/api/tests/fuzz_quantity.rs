//! Property tests: the quantity and GPU-annotation parsers never panic on any input, agree with each
//! other, and read back what `format_milli` writes.

use kai_api::quantity::{
    QuantityError, format_milli, gpu_fraction_milli, milli_value, positive_count, value,
};
use proptest::prelude::*;

/// Text shaped like a quantity (sign, digits, dot, exponent, suffix) so the interesting paths are hit,
/// not only the first-character rejection.
fn quantity_like() -> impl Strategy<Value = String> {
    "[+-]?[0-9]{0,40}(\\.[0-9]{0,40})?([eE][+-]?[0-9]{0,4}|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[a-zA-Z]{1,3})?"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parsers_never_panic_on_any_text(text in any::<String>()) {
        let _ = milli_value(&text);
        let _ = value(&text);
        let _ = gpu_fraction_milli(&text);
        let _ = positive_count("gpu-memory", &text);
    }

    #[test]
    fn parsers_never_panic_on_quantity_shaped_text(text in quantity_like()) {
        let milli = milli_value(&text);
        let units = value(&text);
        // Both read the same number, so they fail together except when only the larger one overflows.
        match (&milli, &units) {
            (Ok(m), Ok(u)) => {
                // Whole units round up from milli-units (for non-negative values).
                if *m >= 0 {
                    prop_assert_eq!(*u, m / 1000 + i64::from(m % 1000 != 0), "{}", text);
                }
            }
            (Err(QuantityError::Overflow(_)), _) | (Err(_), Err(_)) => {}
            (Err(e), Ok(u)) => prop_assert!(false, "{text:?}: milli {e} but units {u}"),
            (Ok(m), Err(e)) => prop_assert!(false, "{text:?}: milli {m} but units {e}"),
        }
        if let Ok(f) = gpu_fraction_milli(&text) {
            prop_assert!((1..=1000).contains(&f), "{text:?} -> {f}");
            prop_assert_eq!(milli.ok(), Some(i64::from(f)), "{}", text);
        }
    }

    #[test]
    fn format_milli_reads_back(milli in any::<i64>()) {
        // i64::MIN has no positive counterpart; every other value survives the round trip.
        prop_assume!(milli != i64::MIN);
        prop_assert_eq!(milli_value(&format_milli(milli)), Ok(milli));
    }

    #[test]
    fn positive_counts_read_back(n in 1u32..) {
        prop_assert_eq!(positive_count("gpu-memory", &n.to_string()), Ok(n));
    }

    #[test]
    fn fractions_in_range_read_back(milli in 1u32..=1000) {
        let text = format!("{}.{:03}", milli / 1000, milli % 1000);
        prop_assert_eq!(gpu_fraction_milli(&text), Ok(milli));
    }
}
