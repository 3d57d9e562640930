//! Property tests: the duration grammar of flags and environment variables never panics, and reads back
//! what `format` writes.

use std::time::Duration;

use kai_api::duration::{format, parse};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_never_panics_on_any_text(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn parse_never_panics_on_duration_shaped_text(
        text in "([0-9]{0,30}(\\.[0-9]{0,30})?(ns|us|µs|ms|s|m|h|x|)){0,5}",
    ) {
        let _ = parse(&text);
    }

    #[test]
    fn format_reads_back(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
    }
}
