//! Fenced writes: a tower layer in the client stack that refuses every write request unless this process
//! leads at the moment the request leaves for the API server.
//!
//! Checking leadership at each call site is not enough: a write can wait behind the client's rate limit,
//! a semaphore or a long poll (a GPU reservation pod reporting its device) for longer than the lease
//! lasts. The layer sits below the rate limiter, so the check runs after every wait the process adds,
//! right before the request is handed to the HTTP connection. Reads, watches and the lease's own
//! renewals (which use a separate client) are not fenced.
//!
//! Owns: which requests are writes and the refusal. Must not: decide leadership (that is
//! [`crate::lease`]).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{Method, Request};
use tower::BoxError;

use crate::lease::LeaderGuard;

/// The refusal a fenced write fails with (kube reports it as a service error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process did not lead when the write was about to be sent.
    #[error("{method} {path} not sent: this process is not the leader")]
    NotLeader {
        /// The request's method.
        method: Method,
        /// The request's path, for the log line of whoever issued it.
        path: String,
    },
}

/// Whether a request changes state on the API server (everything but GET, HEAD and OPTIONS).
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Tower layer refusing writes while `guard` says this process does not lead.
#[derive(Debug, Clone)]
pub struct FenceLayer {
    guard: LeaderGuard,
}

impl FenceLayer {
    /// A layer checking `guard` right before each write is sent.
    pub fn new(guard: LeaderGuard) -> Self {
        Self { guard }
    }
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            guard: self.guard.clone(),
        }
    }
}

/// Service produced by [`FenceLayer`].
#[derive(Debug, Clone)]
pub struct FenceService<S> {
    inner: S,
    guard: LeaderGuard,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<B>> for FenceService<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if is_write(request.method()) && self.guard.check().is_err() {
            let refusal = Error::NotLeader {
                method: request.method().clone(),
                path: request.uri().path().to_owned(),
            };
            return Box::pin(std::future::ready(Err(BoxError::from(refusal))));
        }
        let sent = self.inner.call(request);
        Box::pin(async move { sent.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::{Arc, Mutex},
        time::Duration,
    };

    use tower::{Layer as _, Service as _, ServiceExt as _};

    use super::*;
    use crate::client::{RateLimit, RateLimitLayer};
    use crate::lease::Revocable;

    /// Counts the requests that reached the "network", by method.
    #[derive(Clone, Default)]
    struct Sent(Arc<Mutex<Vec<Method>>>);

    impl Sent {
        fn service(
            &self,
        ) -> impl tower::Service<
            Request<()>,
            Response = (),
            Error = Infallible,
            Future = std::future::Ready<Result<(), Infallible>>,
        > + Clone {
            let sent = self.0.clone();
            tower::service_fn(move |r: Request<()>| {
                sent.lock().expect("test lock").push(r.method().clone());
                std::future::ready(Ok::<(), Infallible>(()))
            })
        }

        fn methods(&self) -> Vec<Method> {
            self.0.lock().expect("test lock").clone()
        }
    }

    fn request(method: Method) -> Request<()> {
        Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/pods/p/binding")
            .body(())
            .expect("request")
    }

    #[test]
    fn only_get_head_and_options_are_reads() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!is_write(&m), "{m}");
        }
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&m), "{m}");
        }
    }

    #[tokio::test]
    async fn writes_go_out_while_leading_and_are_refused_after_the_lease_is_lost() {
        let (guard, revoke) = Revocable::leading();
        let sent = Sent::default();
        let mut svc = FenceLayer::new(guard).layer(sent.service());

        svc.ready()
            .await
            .expect("ready")
            .call(request(Method::POST))
            .await
            .expect("sent while leading");
        revoke.revoke();
        let refused = svc
            .ready()
            .await
            .expect("ready")
            .call(request(Method::PATCH))
            .await;
        let err = refused.expect_err("a write after losing the lease is refused");
        assert!(err.to_string().contains("not the leader"), "{err}");
        svc.ready()
            .await
            .expect("ready")
            .call(request(Method::GET))
            .await
            .expect("reads still go out");
        assert_eq!(sent.methods(), vec![Method::POST, Method::GET]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_waiting_behind_the_rate_limit_is_checked_when_it_leaves() {
        let (guard, revoke) = Revocable::leading();
        let sent = Sent::default();
        // As the client stack orders them: the rate limit outside, the fence below it.
        let mut svc = RateLimitLayer::new(RateLimit { qps: 1.0, burst: 1 })
            .layer(FenceLayer::new(guard).layer(sent.service()));

        let first = svc
            .ready()
            .await
            .expect("ready")
            .call(request(Method::POST))
            .await;
        assert!(first.is_ok(), "the burst token lets the first write out");
        let started = tokio::time::Instant::now();
        // The second write waits a second for a token; the lease is lost half way.
        let second = async {
            svc.ready()
                .await
                .expect("ready")
                .call(request(Method::POST))
                .await
        };
        let lose_lease = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            revoke.revoke();
        };
        let (second, ()) = tokio::join!(second, lose_lease);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "it did wait for the token"
        );
        assert!(second.is_err(), "checked after the wait, not before it");
        assert_eq!(
            sent.methods(),
            vec![Method::POST],
            "only the first write reached the server"
        );
    }
}
