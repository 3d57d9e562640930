//! Graceful shutdown: SIGTERM or SIGINT cancels one [`CancellationToken`] that every task watches
//! (`token.cancelled().await` in a `select!`, or `token.clone().cancelled_owned()` as a shutdown future).
//! A second signal exits at once, for when a graceful stop hangs.
//!
//! Owns: signal handling. Must not: decide how each task winds down.

pub use tokio_util::sync::CancellationToken;

/// Why signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime refused to register a handler.
    #[error("cannot install a handler for {signal}: {source}")]
    Install {
        /// The signal's name.
        signal: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Exit status after a second signal: 128 + SIGTERM (15), as a shell would report it.
const FORCED_EXIT_CODE: i32 = 143;

/// Installs SIGTERM and SIGINT handlers and returns the token they cancel. Must be called inside a tokio
/// runtime; handlers are registered before this returns, so no signal is lost after it.
pub fn on_signals() -> Result<CancellationToken, Error> {
    let token = CancellationToken::new();
    let mut signals = Signals::install()?;
    let cancel = token.clone();
    tokio::spawn(async move {
        let first = signals.next().await;
        tracing::info!(
            signal = first,
            "shutting down gracefully; send the signal again to exit at once"
        );
        cancel.cancel();
        let second = signals.next().await;
        tracing::warn!(
            signal = second,
            "second signal, exiting without finishing shutdown"
        );
        std::process::exit(FORCED_EXIT_CODE);
    });
    Ok(token)
}

#[cfg(unix)]
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate()).map_err(|source| Error::Install {
            signal: "SIGTERM",
            source,
        })?;
        let interrupt = signal(SignalKind::interrupt()).map_err(|source| Error::Install {
            signal: "SIGINT",
            source,
        })?;
        Ok(Self { terminate, interrupt })
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> Result<Self, Error> {
        Ok(Self)
    }

    async fn next(&mut self) -> &'static str {
        // Without Unix signals only Ctrl-C exists; a failed registration means no signal will come.
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(_) => std::future::pending().await,
        }
    }
}
