//! Process-wide tracing setup: one `tracing-subscriber` registry with an [`EnvFilter`] and a plain or JSON
//! formatting layer on stderr.
//!
//! Owns: the subscriber, the log format choice and [`LogSettings`]. Must not: decide what components log,
//! or know the command line (`args` turns the flags into [`LogSettings`], so the dependency runs one way).

use tracing_subscriber::{EnvFilter, layer::SubscriberExt as _, util::SubscriberInitExt as _};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
}

/// What the global subscriber is set up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// Filter in `tracing` EnvFilter syntax, e.g. `info` or `info,kai_scheduler=debug`.
    pub filter: String,
    /// How lines are written.
    pub format: LogFormat,
}

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log filter has a directive `EnvFilter` rejects.
    #[error("invalid log filter {filter:?}: {source}")]
    InvalidFilter {
        /// The filter as given.
        filter: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed (e.g. `init` called twice).
    #[error("a global tracing subscriber is already installed")]
    AlreadyInitialized(#[source] tracing_subscriber::util::TryInitError),
}

/// Installs the global subscriber (in the binaries: from `--log-level` / `RUST_LOG` and `--log-format`).
///
/// Call once, first thing in `main`, before anything logs.
pub fn init(settings: &LogSettings) -> Result<(), Error> {
    let filter = parse_filter(&settings.filter)?;
    let registry = tracing_subscriber::registry().with(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour only on a terminal: log files and collectors get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match settings.format {
        LogFormat::Plain => registry.with(fmt).try_init(),
        LogFormat::Json => registry
            .with(fmt.json().flatten_event(true).with_current_span(true))
            .try_init(),
    }
    .map_err(Error::AlreadyInitialized)
}

/// Parses a filter such as `info` or `info,kai_scheduler=debug`; used by the flag's value parser too, so a
/// bad filter is reported by clap before anything starts.
pub(crate) fn parse_filter(filter: &str) -> Result<EnvFilter, Error> {
    EnvFilter::builder()
        .parse(filter)
        .map_err(|source| Error::InvalidFilter {
            filter: filter.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_levels_and_per_target_directives() {
        for filter in [
            "info",
            "debug",
            "warn,kai_scheduler=debug",
            "kube=warn,info",
            "off",
            "",
        ] {
            assert!(parse_filter(filter).is_ok(), "{filter:?} should parse");
        }
    }

    #[test]
    fn rejects_malformed_directives() {
        let err = parse_filter("info,kube=loud").expect_err("unknown level must be rejected");
        assert!(matches!(&err, Error::InvalidFilter { filter, .. } if filter == "info,kube=loud"));
        assert!(err.to_string().contains("kube=loud"));
    }
}
