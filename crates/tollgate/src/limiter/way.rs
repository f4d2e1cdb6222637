//! The two ways a decision can wait for the store: awaited, or not at all.
//!
//! A limiter's decision ([`Limiter::allow_by`](super::Limiter::allow_by)) is written once, generic over a
//! [`Way`]; the awaited path and the immediate path differ only in the
//! three places where one waits and the other cannot.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use tokio::sync::futures::OwnedNotified;

use crate::backend::{Binding, LeaseAsk, Leased};
use crate::decision::Decision;
use crate::error::BackendError;
use crate::operation::Operation;

/// Where a decision waits, and what it does instead when it cannot.
pub(super) trait Way {
    /// The store's answer to a request of `cost` units for `key`; `None`,
    /// with nothing done, when this way cannot have it.
    fn apply<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Option<Result<Decision, BackendError>>> + Send;

    /// The store's answer to a request asking for a lease: `None`, with
    /// nothing done, when this way cannot have it; `Some(None)` when the
    /// binding does not lease.
    fn lease<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        ask: LeaseAsk,
    ) -> impl Future<Output = Option<Option<Result<Leased, BackendError>>>> + Send;

    /// A per-key operation applied to the store; `None`, with nothing done,
    /// when this way cannot apply it.
    fn operate<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Option<Result<(), BackendError>>> + Send;

    /// Waits until another request of the key has the store's answer (the
    /// deny cache's single flight): `true` once it has, `false` when this
    /// way does not wait and the request asks the store itself.
    fn answered(notified: OwnedNotified) -> impl Future<Output = bool> + Send;

    /// Re-establishes the store's connection before a circuit breaker's
    /// probe; a way that cannot wait has nothing to re-establish (its
    /// backend keeps no connection).
    fn reconnect<Bd: Binding>(binding: &Bd) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// The awaited way: every step waits for what it needs.
pub(super) struct Awaited;

impl Way for Awaited {
    #[inline]
    async fn apply<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Decision, BackendError>> {
        Some(binding.apply(key, cost).await)
    }

    #[inline]
    async fn lease<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        ask: LeaseAsk,
    ) -> Option<Option<Result<Leased, BackendError>>> {
        Some(binding.lease(key, ask).await)
    }

    #[inline]
    async fn operate<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        op: Operation,
    ) -> Option<Result<(), BackendError>> {
        Some(binding.operate(key, op).await)
    }

    #[inline]
    async fn answered(notified: OwnedNotified) -> bool {
        notified.await;
        true
    }

    #[inline]
    async fn reconnect<Bd: Binding>(binding: &Bd) -> Result<(), BackendError> {
        binding.reconnect().await
    }
}

/// The immediate way, for a backend that [decides
/// now](crate::backend::Backend::decides_now): nothing waits, so a future
/// of this way is ready at its first poll ([`at_once`]).
pub(super) struct AtOnce;

impl Way for AtOnce {
    #[inline]
    async fn apply<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Decision, BackendError>> {
        binding.apply_now(key, cost)
    }

    /// A backend that decides now keeps no leases.
    #[inline]
    async fn lease<Bd: Binding>(
        _: &Bd,
        _: &[u8],
        _: LeaseAsk,
    ) -> Option<Option<Result<Leased, BackendError>>> {
        None
    }

    #[inline]
    async fn operate<Bd: Binding>(
        binding: &Bd,
        key: &[u8],
        op: Operation,
    ) -> Option<Result<(), BackendError>> {
        binding.operate_now(key, op)
    }

    #[inline]
    async fn answered(_: OwnedNotified) -> bool {
        false
    }

    #[inline]
    async fn reconnect<Bd: Binding>(_: &Bd) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The output of a future of the [`Awaited`] way, which always has the
/// store's answer.
#[inline]
pub(super) async fn awaited<T>(future: impl Future<Output = Option<T>>) -> T {
    match future.await {
        Some(output) => output,
        None => unreachable!("the awaited way always has the store's answer"),
    }
}

/// The output of a future of the [`AtOnce`] way, which never waits: polled
/// once, it is ready. `None` if it were not, the future then dropped
/// (which gives back whatever it held, as any dropped decision does).
#[inline]
pub(super) fn at_once<T>(future: impl Future<Output = Option<T>>) -> Option<T> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => None,
    }
}
