//! Command-line flags every component shares, flattened into each binary's own clap `Args` with
//! `#[command(flatten)]`. Every flag also reads an environment variable, so a Deployment can set either.
//!
//! Owns: flag names, defaults and their conversion into the typed settings the other modules take
//! ([`RateLimit`], [`LeaderElection`], [`LogSettings`], the liveness timeout). Must not: hold
//! component-specific flags.

use std::{net::SocketAddr, time::Duration};

use api::duration;
use clap::builder::BoolishValueParser;

use crate::{
    client::RateLimit,
    lease::{self, LeaderElection, LeaseConfig},
    liveness,
    telemetry::{self, LogFormat, LogSettings},
};

/// Flags shared by the podgrouper and the scheduler.
///
/// The Kubernetes client's QPS/burst and the lease name have no default here because each component
/// picks its own; read them through [`CommonArgs::rate_limit`] and [`CommonArgs::leader_election`].
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info` or `info,kai_scheduler=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info", value_parser = parse_log_filter)]
    pub log_level: String,

    /// Log line format.
    #[arg(long, env = "KAI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Address of the admin server (/livez, /readyz, /metrics).
    #[arg(long, env = "KAI_ADMIN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub admin_address: SocketAddr,

    /// /livez fails once the component's loop has made no progress for this long, or at once when a
    /// watch it needs has ended; must be longer than the loop's period.
    /// [default: max(10 x the loop's period, 60s)]
    #[arg(long, env = "KAI_LIVENESS_TIMEOUT", value_parser = duration::parse)]
    pub liveness_timeout: Option<Duration>,

    /// Client-side limit on requests per second to the API server; 0 or negative means unlimited.
    /// [default: set by each component]
    #[arg(long, env = "KAI_KUBE_QPS", allow_negative_numbers = true)]
    pub kube_qps: Option<f64>,

    /// Requests allowed in a burst above --kube-qps. [default: set by each component]
    #[arg(long, env = "KAI_KUBE_BURST")]
    pub kube_burst: Option<u32>,

    /// Elect a single active replica through a coordination.k8s.io/v1 Lease. With
    /// `--leader-elect=false` the process acts as the leader at once and never touches a Lease: only
    /// where no other copy can run (a test, a developer's machine).
    // On by default, as kube-scheduler's: a process started without the flag, by hand or by a
    // Deployment written without the chart, must not become a second writer beside another copy (a
    // rollout, a replacement started while its node is cut off). Running alone is the exception, and
    // is said explicitly.
    #[arg(
        long,
        env = "KAI_LEADER_ELECT",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
    )]
    pub leader_elect: bool,

    /// Name of the Lease object. [default: set by each component]
    #[arg(long, env = "KAI_LEASE_NAME")]
    pub lease_name: Option<String>,

    /// Namespace of the Lease object.
    #[arg(long, env = "KAI_LEASE_NAMESPACE", default_value = api::keys::SYSTEM_NAMESPACE)]
    pub lease_namespace: String,

    /// How long a lease stays valid after its last renewal; followers wait this long before taking over.
    #[arg(long, env = "KAI_LEASE_DURATION", default_value = "15s", value_parser = duration::parse)]
    pub lease_duration: Duration,

    /// The leader gives up leadership if it has not renewed within this time; must be shorter than
    /// --lease-duration.
    #[arg(long, env = "KAI_RENEW_DEADLINE", default_value = "10s", value_parser = duration::parse)]
    pub renew_deadline: Duration,

    /// Interval between attempts to acquire or renew the lease; must be shorter than --renew-deadline.
    #[arg(long, env = "KAI_RETRY_PERIOD", default_value = "2s", value_parser = duration::parse)]
    pub retry_period: Duration,

    /// Identity written into the Lease. [default: hostname plus a random suffix]
    #[arg(long, env = "KAI_IDENTITY")]
    pub identity: Option<String>,
}

impl CommonArgs {
    /// The tracing settings: `--log-level` and `--log-format`.
    pub fn log_settings(&self) -> LogSettings {
        LogSettings {
            filter: self.log_level.clone(),
            format: self.log_format,
        }
    }

    /// The client rate limit: the flags where given, else the component's `defaults`.
    pub fn rate_limit(&self, defaults: RateLimit) -> RateLimit {
        RateLimit {
            qps: self.kube_qps.unwrap_or(defaults.qps),
            burst: self.kube_burst.unwrap_or(defaults.burst),
        }
    }

    /// How old the heartbeat of a loop that beats at least every `loop_period` may get:
    /// `--liveness-timeout` where given (it must exceed the period), else max(10 x period, 60 s).
    pub fn liveness_timeout(&self, loop_period: Duration) -> Result<Duration, liveness::Error> {
        liveness::timeout(self.liveness_timeout, loop_period)
    }

    /// The leader-election settings, validated; `default_lease_name` is used when `--lease-name` is unset.
    ///
    /// With `--leader-elect=false` the settings are not checked and the result is
    /// [`LeaderElection::Disabled`].
    pub fn leader_election(&self, default_lease_name: &str) -> Result<LeaderElection, lease::Error> {
        let Self {
            log_level: _,
            log_format: _,
            admin_address: _,
            liveness_timeout: _,
            kube_qps: _,
            kube_burst: _,
            leader_elect,
            lease_name,
            lease_namespace,
            lease_duration,
            renew_deadline,
            retry_period,
            identity,
        } = self;
        if !leader_elect {
            return Ok(LeaderElection::Disabled);
        }
        let config = LeaseConfig::new(
            lease_name
                .clone()
                .unwrap_or_else(|| default_lease_name.to_owned()),
            lease_namespace.clone(),
            identity.clone().unwrap_or_else(lease::default_identity),
            *lease_duration,
            *renew_deadline,
            *retry_period,
        )?;
        Ok(LeaderElection::Enabled(config))
    }
}

fn parse_log_filter(filter: &str) -> Result<String, telemetry::Error> {
    telemetry::parse_filter(filter).map(|_| filter.to_owned())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser};

    use super::*;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        TestCli::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map(|cli| cli.common)
    }

    #[test]
    fn cli_is_valid() {
        TestCli::command().debug_assert();
    }

    // Environment fallbacks are not exercised here: tests run in parallel in one process, and setting
    // process environment from a test races with every other test that parses flags.

    #[test]
    fn defaults() {
        let args = parse(&[]).expect("defaults parse");
        assert_eq!(args.log_level, "info");
        assert_eq!(args.log_format, LogFormat::Plain);
        assert_eq!(args.admin_address, "0.0.0.0:8080".parse().expect("address"));
        assert_eq!(args.liveness_timeout, None);
        assert_eq!(
            args.liveness_timeout(Duration::from_secs(1)),
            Ok(Duration::from_secs(60))
        );
        assert_eq!(args.kube_qps, None);
        assert_eq!(args.kube_burst, None);
        assert!(
            args.leader_elect,
            "on unless said otherwise, as in kube-scheduler"
        );
        assert_eq!(args.lease_name, None);
        assert_eq!(args.lease_namespace, "kai-scheduler");
        assert_eq!(args.lease_duration, Duration::from_secs(15));
        assert_eq!(args.renew_deadline, Duration::from_secs(10));
        assert_eq!(args.retry_period, Duration::from_secs(2));
        assert_eq!(args.identity, None);
    }

    #[test]
    fn parses_every_flag() {
        let args = parse(&[
            "--log-level=warn,kube=debug",
            "--log-format=json",
            "--admin-address=127.0.0.1:9090",
            "--liveness-timeout=2m",
            "--kube-qps=50.5",
            "--kube-burst=100",
            "--leader-elect",
            "--lease-name=my-lease",
            "--lease-namespace=ops",
            "--lease-duration=1m",
            "--renew-deadline=40s",
            "--retry-period=500ms",
            "--identity=me",
        ])
        .expect("all flags parse");
        assert_eq!(args.log_level, "warn,kube=debug");
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.admin_address, "127.0.0.1:9090".parse().expect("address"));
        assert_eq!(args.liveness_timeout, Some(Duration::from_secs(120)));
        assert_eq!(args.kube_qps, Some(50.5));
        assert_eq!(args.kube_burst, Some(100));
        assert!(args.leader_elect);
        assert_eq!(args.lease_name.as_deref(), Some("my-lease"));
        assert_eq!(args.lease_namespace, "ops");
        assert_eq!(args.lease_duration, Duration::from_secs(60));
        assert_eq!(args.renew_deadline, Duration::from_secs(40));
        assert_eq!(args.retry_period, Duration::from_millis(500));
        assert_eq!(args.identity.as_deref(), Some("me"));
    }

    #[test]
    fn log_settings_carry_the_log_flags() {
        let args = parse(&["--log-level=warn,kube=debug", "--log-format=json"]).expect("parse");
        assert_eq!(
            args.log_settings(),
            LogSettings {
                filter: "warn,kube=debug".to_owned(),
                format: LogFormat::Json,
            }
        );
    }

    #[test]
    fn leader_elect_takes_go_style_booleans() {
        assert!(parse(&["--leader-elect"]).expect("bare flag").leader_elect);
        assert!(parse(&["--leader-elect=true"]).expect("=true").leader_elect);
        assert!(!parse(&["--leader-elect=false"]).expect("=false").leader_elect);
        assert!(!parse(&["--leader-elect=0"]).expect("=0").leader_elect);
        assert!(parse(&["--leader-elect=maybe"]).is_err());
        // A following word is not swallowed as the flag's value.
        assert!(parse(&["--leader-elect", "false"]).is_err());
    }

    #[test]
    fn liveness_timeout_must_exceed_the_loop_period() {
        let args = parse(&["--liveness-timeout=5s"]).expect("parse");
        assert_eq!(
            args.liveness_timeout(Duration::from_secs(1)),
            Ok(Duration::from_secs(5))
        );
        assert!(args.liveness_timeout(Duration::from_secs(5)).is_err());
        assert!(parse(&["--liveness-timeout=5"]).is_err(), "unitless duration");
    }

    #[test]
    fn rejects_bad_values_at_parse_time() {
        assert!(parse(&["--lease-duration=15"]).is_err(), "unitless duration");
        assert!(parse(&["--retry-period=soon"]).is_err());
        assert!(parse(&["--admin-address=localhost"]).is_err(), "needs host:port");
        assert!(parse(&["--log-format=xml"]).is_err());
        assert!(parse(&["--log-level=info,kube=loud"]).is_err());
        assert!(parse(&["--kube-burst=-1"]).is_err());
    }

    #[test]
    fn negative_qps_is_a_value_not_a_flag() {
        assert_eq!(
            parse(&["--kube-qps", "-1"]).expect("negative qps").kube_qps,
            Some(-1.0)
        );
    }

    #[test]
    fn rate_limit_prefers_flags_over_component_defaults() {
        let defaults = RateLimit { qps: 20.0, burst: 30 };
        assert_eq!(parse(&[]).expect("parse").rate_limit(defaults), defaults);
        assert_eq!(
            parse(&["--kube-qps=5"]).expect("parse").rate_limit(defaults),
            RateLimit { qps: 5.0, burst: 30 }
        );
        assert_eq!(
            parse(&["--kube-burst=1"]).expect("parse").rate_limit(defaults),
            RateLimit { qps: 20.0, burst: 1 }
        );
    }

    #[test]
    fn leader_election_disabled_skips_validation() {
        let args = parse(&["--leader-elect=false", "--renew-deadline=1h"]).expect("parse");
        assert_eq!(
            args.leader_election("kai-scheduler").expect("disabled"),
            LeaderElection::Disabled
        );
    }

    #[test]
    fn leader_election_enabled_uses_component_default_name() {
        let args = parse(&["--leader-elect", "--identity=pod-a"]).expect("parse");
        let LeaderElection::Enabled(config) = args.leader_election("kai-scheduler").expect("valid") else {
            panic!("expected an enabled election");
        };
        assert_eq!(config.name(), "kai-scheduler");
        assert_eq!(config.namespace(), "kai-scheduler");
        assert_eq!(config.identity(), "pod-a");
        assert_eq!(config.lease_duration(), Duration::from_secs(15));

        let args = parse(&["--leader-elect", "--lease-name=shard-a"]).expect("parse");
        let LeaderElection::Enabled(config) = args.leader_election("kai-scheduler").expect("valid") else {
            panic!("expected an enabled election");
        };
        assert_eq!(config.name(), "shard-a");
        assert!(!config.identity().is_empty(), "a default identity is generated");
    }

    #[test]
    fn leader_election_enabled_rejects_inconsistent_timings() {
        let args = parse(&["--leader-elect", "--renew-deadline=15s"]).expect("parse");
        assert!(args.leader_election("kai-scheduler").is_err());
    }

    #[test]
    fn leader_election_is_enabled_without_any_flag() {
        let args = parse(&["--identity=pod-a"]).expect("parse");
        let LeaderElection::Enabled(config) = args.leader_election("kai-scheduler").expect("valid") else {
            panic!("a process started without --leader-elect must still compete for the lease");
        };
        assert_eq!(config.name(), "kai-scheduler");
    }
}
