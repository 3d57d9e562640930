//! Building the Kubernetes client: configuration from `KUBECONFIG` or the in-cluster service account
//! (kube's `Config::infer`), a per-component `User-Agent`, a client-side token-bucket rate limit
//! (QPS + burst, as client-go has) applied as a tower layer around kube's HTTP stack, and, for a
//! component that writes only while it leads, the write fence ([`crate::fence`]) below the rate limit.
//!
//! Owns: how a component talks to the API server. Must not: issue requests itself.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use http::{HeaderValue, header::USER_AGENT};
use kube::{Client, Config, client::ClientBuilder};
use tokio::time::{Instant, Sleep};

use crate::{fence::FenceLayer, lease::LeaderGuard};

/// Client-side request rate limit: a token bucket refilled at `qps` tokens per second holding at most
/// `burst` tokens. Every request (including the start of a watch) takes one token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second; 0, negative or not finite means unlimited.
    pub qps: f64,
    /// Requests that may go out at once after a quiet period; at least 1 is used.
    pub burst: u32,
}

impl RateLimit {
    /// No limit at all.
    pub const UNLIMITED: Self = Self { qps: 0.0, burst: 0 };

    /// Whether this setting limits anything.
    pub fn is_unlimited(&self) -> bool {
        !(self.qps.is_finite() && self.qps > 0.0)
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither a kubeconfig nor an in-cluster service account was usable.
    #[error("no Kubernetes configuration found (set KUBECONFIG or run in a pod): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The user agent is not a valid header value.
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
    /// kube rejected the configuration (TLS material, proxy, auth plugin).
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[source] kube::Error),
}

/// Builds a client from the inferred configuration (`KUBECONFIG`/`~/.kube/config`, else in-cluster).
///
/// `user_agent` names the component, e.g. `kai-scheduler/0.1.0`; the API server's audit log and
/// `apiserver_request_total` show it.
pub async fn build(user_agent: &str, rate_limit: RateLimit) -> Result<Client, Error> {
    let config = Config::infer().await.map_err(Error::Infer)?;
    from_config(config, user_agent, rate_limit)
}

/// Like [`build`], for a component that may write only while it leads: every write request is checked
/// against `leader` when it leaves the process, after any wait for the rate limit (see [`crate::fence`]).
pub async fn build_fenced(
    user_agent: &str,
    rate_limit: RateLimit,
    leader: LeaderGuard,
) -> Result<Client, Error> {
    let config = Config::infer().await.map_err(Error::Infer)?;
    let builder = ClientBuilder::try_from(with_user_agent(config, user_agent)?).map_err(Error::Build)?;
    // `with_layer` wraps what is there: the fence goes on first so that it runs after the rate limit.
    Ok(builder
        .with_layer(&FenceLayer::new(leader))
        .with_layer(&RateLimitLayer::new(rate_limit))
        .build())
}

/// Builds a client from an explicit configuration (tests and tools that already have one).
pub fn from_config(config: Config, user_agent: &str, rate_limit: RateLimit) -> Result<Client, Error> {
    let builder = ClientBuilder::try_from(with_user_agent(config, user_agent)?).map_err(Error::Build)?;
    Ok(builder.with_layer(&RateLimitLayer::new(rate_limit)).build())
}

/// `config` sending `user_agent` instead of kube's default.
fn with_user_agent(mut config: Config, user_agent: &str) -> Result<Config, Error> {
    let value = HeaderValue::from_str(user_agent).map_err(|_| Error::UserAgent(user_agent.to_owned()))?;
    config.headers.retain(|(name, _)| name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(config)
}

/// Pure token-bucket state; time is passed in so the arithmetic is tested without clocks.
#[derive(Debug, Clone)]
struct TokenBucket {
    /// Tokens added per second (> 0).
    rate: f64,
    /// Maximum tokens held (>= 1).
    capacity: f64,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket, or `None` when `limit` is unlimited.
    fn new(limit: RateLimit, now: Instant) -> Option<Self> {
        if limit.is_unlimited() {
            return None;
        }
        let capacity = f64::from(limit.burst.max(1));
        Some(Self {
            rate: limit.qps,
            capacity,
            tokens: capacity,
            updated: now,
        })
    }

    /// Takes a token if one is available at `now`, else returns how long until one will be.
    fn try_acquire(&mut self, now: Instant) -> Result<(), Duration> {
        // An earlier `now` (callers racing on clock reads) adds nothing rather than going negative.
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.updated = self.updated.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.rate;
            // Whole microseconds, at least one: waking a hair early costs one more short wait, not a spin.
            Err(Duration::from_micros((wait * 1e6).round() as u64).max(Duration::from_micros(1)))
        }
    }
}

/// Tower layer that holds each request until the token bucket grants it.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer {
    limit: RateLimit,
}

impl RateLimitLayer {
    /// A layer enforcing `limit`.
    pub fn new(limit: RateLimit) -> Self {
        Self { limit }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            bucket: TokenBucket::new(self.limit, Instant::now()),
            granted: false,
            sleep: None,
        }
    }
}

/// Service produced by [`RateLimitLayer`].
///
/// Readiness waits for a token; kube puts a `Buffer` in front of the stack, so one instance serves all
/// clones of the `Client` and the bucket is shared without locks.
pub struct RateLimitService<S> {
    inner: S,
    bucket: Option<TokenBucket>,
    /// A token was taken for the next `call`.
    granted: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimitService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("bucket", &self.bucket)
            .field("granted", &self.granted)
            .finish_non_exhaustive()
    }
}

impl<S, Req> tower::Service<Req> for RateLimitService<S>
where
    S: tower::Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = self.bucket.as_mut() {
            while !self.granted {
                if let Some(sleep) = self.sleep.as_mut() {
                    ready!(sleep.as_mut().poll(cx));
                    self.sleep = None;
                }
                match bucket.try_acquire(Instant::now()) {
                    Ok(()) => self.granted = true,
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // tower's contract: `call` follows a successful `poll_ready`, which took the token.
        self.granted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use tower::{Layer as _, Service as _, ServiceExt as _};

    use super::*;

    fn bucket(qps: f64, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket::new(RateLimit { qps, burst }, now).expect("limited")
    }

    #[test]
    fn zero_negative_and_non_finite_qps_are_unlimited() {
        let now = Instant::now();
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(RateLimit { qps, burst: 10 }.is_unlimited(), "{qps}");
            assert!(TokenBucket::new(RateLimit { qps, burst: 10 }, now).is_none());
        }
        assert!(RateLimit::UNLIMITED.is_unlimited());
        assert!(!RateLimit { qps: 0.5, burst: 0 }.is_unlimited());
    }

    #[test]
    fn full_bucket_allows_a_burst_then_spaces_requests_by_one_over_qps() {
        let t0 = Instant::now();
        let mut b = bucket(10.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.try_acquire(t0), Ok(()));
        }
        assert_eq!(b.try_acquire(t0), Err(Duration::from_millis(100)));
        assert_eq!(
            b.try_acquire(t0 + Duration::from_millis(99)),
            Err(Duration::from_millis(1))
        );
        assert_eq!(b.try_acquire(t0 + Duration::from_millis(100)), Ok(()));
        assert_eq!(
            b.try_acquire(t0 + Duration::from_millis(100)),
            Err(Duration::from_millis(100))
        );
    }

    #[test]
    fn refill_is_capped_at_burst() {
        let t0 = Instant::now();
        let mut b = bucket(100.0, 2, t0);
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Ok(()));
        // An hour of idleness refills only up to the burst.
        let later = t0 + Duration::from_secs(3_600);
        assert_eq!(b.try_acquire(later), Ok(()));
        assert_eq!(b.try_acquire(later), Ok(()));
        assert!(b.try_acquire(later).is_err());
    }

    #[test]
    fn zero_burst_still_lets_one_request_through() {
        let t0 = Instant::now();
        let mut b = bucket(1.0, 0, t0);
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Err(Duration::from_secs(1)));
    }

    #[test]
    fn fractional_qps_waits_longer_than_a_second() {
        let t0 = Instant::now();
        let mut b = bucket(0.5, 1, t0);
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Err(Duration::from_secs(2)));
        assert_eq!(
            b.try_acquire(t0 + Duration::from_secs(1)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(b.try_acquire(t0 + Duration::from_secs(2)), Ok(()));
    }

    #[test]
    fn clock_going_backwards_neither_refills_nor_drains() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = bucket(1.0, 1, t0);
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(
            b.try_acquire(t0 - Duration::from_secs(5)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(b.try_acquire(t0 + Duration::from_secs(1)), Ok(()));
    }

    #[test]
    fn sustained_rate_matches_qps_over_many_requests() {
        let t0 = Instant::now();
        let mut b = bucket(7.0, 5, t0);
        let mut now = t0;
        let mut granted = 0;
        // Poll every millisecond for 10 s: 5 burst tokens + 70 refilled.
        while now <= t0 + Duration::from_secs(10) {
            if b.try_acquire(now).is_ok() {
                granted += 1;
            }
            now += Duration::from_millis(1);
        }
        assert_eq!(granted, 75);
    }

    fn counting_service(
        calls: Arc<AtomicUsize>,
    ) -> impl tower::Service<(), Response = (), Error = Infallible> {
        tower::service_fn(move |()| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<_, Infallible>(()))
        })
    }

    #[tokio::test(start_paused = true)]
    async fn layer_holds_requests_beyond_the_burst_until_tokens_refill() {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc =
            RateLimitLayer::new(RateLimit { qps: 2.0, burst: 2 }).layer(counting_service(calls.clone()));
        let start = Instant::now();
        for _ in 0..2 {
            svc.ready().await.expect("ready").call(()).await.expect("call");
        }
        assert_eq!(Instant::now(), start, "the burst goes out without waiting");
        svc.ready().await.expect("ready").call(()).await.expect("call");
        assert_eq!(Instant::now() - start, Duration::from_millis(500));
        svc.ready().await.expect("ready").call(()).await.expect("call");
        assert_eq!(Instant::now() - start, Duration::from_millis(1_000));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_layer_never_waits() {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc =
            RateLimitLayer::new(RateLimit { qps: 0.0, burst: 1 }).layer(counting_service(calls.clone()));
        let start = Instant::now();
        for _ in 0..1_000 {
            svc.ready().await.expect("ready").call(()).await.expect("call");
        }
        assert_eq!(Instant::now(), start);
        assert_eq!(calls.load(Ordering::SeqCst), 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_without_call_keeps_the_token_for_the_next_call() {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc =
            RateLimitLayer::new(RateLimit { qps: 1.0, burst: 1 }).layer(counting_service(calls.clone()));
        let start = Instant::now();
        // Polling readiness twice must not take two tokens.
        svc.ready().await.expect("ready");
        svc.ready().await.expect("ready");
        assert_eq!(Instant::now(), start);
        svc.call(()).await.expect("call");
        svc.ready().await.expect("ready").call(()).await.expect("call");
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
    }

    #[test]
    fn user_agent_must_be_a_header_value() {
        let config = Config::new("http://127.0.0.1:1".parse().expect("uri"));
        assert!(matches!(
            from_config(config, "bad\nagent", RateLimit::UNLIMITED),
            Err(Error::UserAgent(agent)) if agent == "bad\nagent"
        ));
    }

    #[tokio::test]
    async fn built_client_sends_the_user_agent_through_the_limited_stack() {
        // A loopback stand-in for the API server that reports the User-Agent it received as gitVersion.
        let app = axum::Router::new().route(
            "/version",
            axum::routing::get(|headers: http::HeaderMap| async move {
                let agent = headers
                    .get(USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                (
                    [(http::header::CONTENT_TYPE, "application/json")],
                    serde_json::json!({
                        "major": "1", "minor": "20", "gitVersion": agent, "gitCommit": "", "gitTreeState": "",
                        "buildDate": "", "goVersion": "", "compiler": "", "platform": ""
                    })
                    .to_string(),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let mut config = Config::new(format!("http://{address}").parse().expect("uri"));
        config
            .headers
            .push((USER_AGENT, HeaderValue::from_static("replaced/0")));
        let client = from_config(
            config,
            "kai-test/1.2.3",
            RateLimit {
                qps: 100.0,
                burst: 10,
            },
        )
        .expect("client");
        for _ in 0..3 {
            assert_eq!(
                client.apiserver_version().await.expect("version").git_version,
                "kai-test/1.2.3"
            );
        }
        server.abort();
    }
}
