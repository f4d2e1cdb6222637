//! The drivers of a decision's machine (`machine.rs`): each carries the
//! machine's question to the store and the answer back, and orders none of
//! the steps itself. [`Limiter::allow_n`] awaits any store;
//! [`Limiter::check_n`] and [`Limiter::decide_now`] run the machine at
//! once on a store that [decides now](crate::backend::Capabilities::decides_now), where it is
//! inlined synchronous code; [`Limiter::operate`] and
//! [`Limiter::operate_now`] drive a per-key operation.

use super::machine::{Pending, Question, Reply, Step, Waiting};
use super::Limiter;
use crate::backend::memory::MemoryBackend;
use crate::backend::{Answer, Backend, BackendError, Binding, Call};
use crate::decision::Decision;
use crate::error::Error;
use crate::operation::{check_cost, Operation};

impl<B: Backend> Limiter<B> {
    /// Decides one request of cost 1 for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the backend failed and the limiter fails
    /// closed; the request must then be treated as denied.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.allow_n(key, 1).await
    }

    /// Decides one request of `cost` units for `key` (`cost = 0` is a peek),
    /// charged as the limiter's [`charge`](crate::LimiterBuilder::charge)
    /// setting says.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`].
    pub async fn allow_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        self.drive(key.as_ref(), cost, self.charges_always()).await
    }

    /// Reports usage known after the fact: decides one request of `cost`
    /// units for `key` and charges it whether admitted or not, on any
    /// backend and whatever the limiter's
    /// [`charge`](crate::LimiterBuilder::charge) setting ([usage reported
    /// after the
    /// fact](crate::_documentation::semantics#usage-reported-after-the-fact-charge-always)).
    /// `allowed` says whether the usage fitted in what was left;
    /// `remaining`, `reset` and `retry_after` are those of the state after
    /// the charge, `retry_after` the wait until a unit request is
    /// admitted. A cost of 0 is a peek, charged nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Policy, Strategy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// // 1,000 tokens a minute per tenant.
    /// let policy = Policy::new(Strategy::FixedWindow, 1_000, Duration::from_secs(60))?;
    /// let limiter = Limiter::builder().policy(policy).build()?;
    /// assert!(limiter.allow_n("tenant-1", 0).await?.allowed); // the check before
    /// assert!(limiter.charge("tenant-1", 600).await?.allowed); // the usage after
    /// assert!(limiter.allow_n("tenant-1", 0).await?.allowed); // 400 left
    /// let report = limiter.charge("tenant-1", 900).await?;
    /// assert!(!report.allowed); // more than was left, and charged all the same
    /// assert!(!limiter.allow_n("tenant-1", 0).await?.allowed); // the next check
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `cost` is above
    /// [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT); otherwise as for
    /// [`Limiter::allow`]. A store whose call failed did not charge (a
    /// reply lost after the store ran the call excepted); under the
    /// `fallback` fail policy the in-memory fallback charges instead.
    pub async fn charge(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        check_cost(cost)?;
        self.drive(key.as_ref(), cost, true).await
    }

    /// Drives a request of `cost` for `key`, `charged` whether admitted or
    /// not when it is, through the machine, awaiting the store.
    async fn drive(&self, key: &[u8], cost: u64, charged: bool) -> Result<Decision, Error> {
        let mut step = self.begin(key, cost, charged);
        loop {
            match step {
                Step::Done(result) => return result,
                Step::Spent(decision, spend) => {
                    spend.keep();
                    return Ok(decision);
                }
                Step::Plain(plain) => {
                    let call = Call::Decide {
                        key: plain.key,
                        cost: plain.cost,
                    };
                    let result = Answer::decided(self.binding.call(call).await);
                    return self.finish_plain(plain, result, false);
                }
                Step::Charge(plain) => {
                    let call = Call::Charge {
                        key: plain.key,
                        cost: plain.cost,
                    };
                    let result = Answer::decided(self.ask_store(call).await);
                    return self.finish_plain(plain, result, true);
                }
                Step::Wait(Waiting { notified, resume }) => {
                    notified.await;
                    step = self.resume(resume, true);
                }
                Step::Ask(mut pending) => {
                    let answer = self.ask(&mut pending).await;
                    return self.finish(pending, answer);
                }
            }
        }
    }

    /// Asks the store what `pending` needs, re-establishing the connection
    /// first for a circuit breaker's probe.
    async fn ask(&self, pending: &mut Pending<'_>) -> Reply {
        if pending.reconnects_first() {
            if let Err(err) = Answer::done(self.binding.call(Call::Reconnect).await) {
                return Reply::Unreachable(err);
            }
        }
        let (key, cost) = (pending.key(), pending.cost());
        match pending.question() {
            Question::Decide => Reply::Decided(Answer::decided(
                self.binding.call(Call::Decide { key, cost }).await,
            )),
            Question::Charge => {
                Reply::Decided(Answer::decided(self.ask_store(Call::Charge { key, cost }).await))
            }
            Question::Lease(ask) => {
                Reply::Leased(Answer::leased(self.ask_store(Call::Lease { key, ask }).await))
            }
        }
    }

    /// Asks the store `call`, or refuses it at once when the store's
    /// [`Capabilities`](crate::backend::Capabilities) leave it out.
    pub(super) async fn ask_store(&self, call: Call<'_, B::Binding>) -> Result<Answer, BackendError> {
        if !self.answers(&call) {
            return Err(call.unsupported());
        }
        self.binding.call(call).await
    }

    /// [`Self::ask_store`] without waiting: `None`, with nothing done, when
    /// the store cannot answer at once.
    #[inline]
    pub(super) fn ask_now(&self, call: Call<'_, B::Binding>) -> Option<Result<Answer, BackendError>> {
        if !self.answers(&call) {
            return Some(Err(call.unsupported()));
        }
        self.binding.call_now(call)
    }

    /// Whether the store answers `call`, as its capabilities say.
    #[inline]
    pub(super) fn answers(&self, call: &Call<'_, B::Binding>) -> bool {
        self.answers.call(call)
    }

    /// Whether the backend answers every decision at once
    /// ([`Capabilities::decides_now`](crate::backend::Capabilities::decides_now)),
    /// so that [`Limiter::decide_now`] decides without waiting.
    pub fn decides_now(&self) -> bool {
        self.answers.decides_now()
    }

    /// [`Limiter::allow_n`] without waiting, on any backend: the same
    /// decision, with the same effects on the key's state, the deny cache,
    /// the circuit breaker and the metrics, when the backend [decides
    /// now](crate::backend::Capabilities::decides_now); `None`, with nothing done, otherwise,
    /// and the caller then awaits [`Limiter::allow_n`]. In memory,
    /// [`Limiter::check_n`] gives the decision itself.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Policy, Strategy};
    ///
    /// let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(60))?;
    /// let limiter = Limiter::builder().policy(policy).build()?;
    /// assert!(limiter.decides_now());
    /// assert!(limiter.decide_now(b"k", 1).unwrap()?.allowed);
    /// assert!(!limiter.decide_now(b"k", 1).unwrap()?.allowed);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Inside the `Some`, as for [`Limiter::allow`]: a backend that
    /// decides now but failed, under fail-closed (never in memory).
    #[inline]
    pub fn decide_now(&self, key: impl AsRef<[u8]>, cost: u64) -> Option<Result<Decision, Error>> {
        if !self.answers.decides_now() {
            return None;
        }
        self.drive_now(key.as_ref(), cost, self.charges_always())
    }

    /// Runs the machine without waiting: a request that would wait for
    /// another of its key asks the store itself, and one that would ask
    /// for a lease asks for a plain decision (a backend that decides now
    /// keeps no leases, and keeps no connection to re-establish). `None`,
    /// with what the request held given back, when the store cannot answer
    /// at once.
    #[inline]
    fn drive_now(&self, key: &[u8], cost: u64, charged: bool) -> Option<Result<Decision, Error>> {
        let mut step = self.begin(key, cost, charged);
        loop {
            match step {
                Step::Done(result) => return Some(result),
                Step::Spent(decision, spend) => {
                    spend.keep();
                    return Some(Ok(decision));
                }
                Step::Plain(plain) => {
                    let call = Call::Decide {
                        key: plain.key,
                        cost: plain.cost,
                    };
                    let result = Answer::decided(self.binding.call_now(call)?);
                    return Some(self.finish_plain(plain, result, false));
                }
                Step::Charge(plain) => {
                    let call = Call::Charge {
                        key: plain.key,
                        cost: plain.cost,
                    };
                    let result = Answer::decided(self.ask_now(call)?);
                    return Some(self.finish_plain(plain, result, true));
                }
                Step::Ask(mut pending) => {
                    pending.without_lease();
                    let (key, cost) = (pending.key(), pending.cost());
                    let answer = if pending.charged() {
                        self.ask_now(Call::Charge { key, cost })?
                    } else {
                        self.binding.call_now(Call::Decide { key, cost })?
                    };
                    return Some(self.finish(pending, Reply::Decided(Answer::decided(answer))));
                }
                Step::Wait(Waiting { resume, .. }) => step = self.resume(resume, false),
            }
        }
    }

    /// Applies a per-key operation to `key` on every limit of the policy
    /// ([per-key operations](crate::_documentation::semantics#per-key-operations)),
    /// and forgets any denial of the key in the deny cache.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `cost` or `duration` when the argument is
    /// out of range ([`Operation::validate`]); [`Error::Backend`] when the
    /// backend failed or does not support operations. The fail policy does
    /// not apply: an operation is never silently dropped.
    pub async fn operate(&self, key: impl AsRef<[u8]>, op: Operation) -> Result<(), Error> {
        let key = key.as_ref();
        if let Some(ask) = self.begin_operation(key, op)? {
            let answer = Answer::leased(self.ask_store(Call::Lease { key, ask }).await);
            self.lease_returned(ask, answer);
        }
        Answer::done(self.ask_store(Call::Operate { key, op }).await).map_err(Error::Backend)
    }

    /// [`Limiter::operate`] without waiting, on any backend: applied at
    /// once when the backend [decides now](crate::backend::Capabilities::decides_now) (always in
    /// memory); `None`, with nothing done, otherwise or when the store
    /// cannot apply it at once, and the caller then awaits
    /// [`Limiter::operate`]. A backend that decides now keeps no leases,
    /// so there are no units to give back first.
    ///
    /// # Errors
    ///
    /// Inside the `Some`, as for [`Limiter::operate`].
    pub fn operate_now(&self, key: impl AsRef<[u8]>, op: Operation) -> Option<Result<(), Error>> {
        let key = key.as_ref();
        if !self.answers.decides_now() {
            return None;
        }
        if let Err(err) = self.begin_operation(key, op) {
            return Some(Err(err));
        }
        Some(Answer::done(self.ask_now(Call::Operate { key, op })?).map_err(Error::Backend))
    }
}

impl Limiter<MemoryBackend> {
    /// Decides one request of cost 1 synchronously (in-memory only; cannot fail).
    #[inline]
    pub fn check(&self, key: impl AsRef<[u8]>) -> Decision {
        self.check_n(key, 1)
    }

    /// Decides one request of `cost` units synchronously (in-memory only),
    /// exactly as [`Limiter::allow_n`] does: the same machine (the lists,
    /// the deny cache and the circuit breaker when there are any, shadow
    /// mode, the metrics), run without waiting.
    /// [`Limiter::decide_now`] is the same for any backend that decides
    /// now.
    #[inline]
    pub fn check_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Decision {
        let key = key.as_ref();
        match self.plain(key, cost) {
            // The in-memory store's infallible call, taken straight on:
            // carrying its `Result` through the machine's answer costs
            // about 135 instructions more per decision, and the general
            // step's size about 25 more (`.ci/instruction-budget`).
            Some(plain) => {
                let decision = self.binding.check(key, cost);
                self.finish_infallible(plain, decision)
            }
            None => self.check_rest(key, cost),
        }
    }

    /// [`Self::check_n`] for a limiter with lists, or a deny cache, a
    /// circuit breaker or a fallback, out of the plain decision's line.
    #[inline(never)]
    fn check_rest(&self, key: &[u8], cost: u64) -> Decision {
        match self.drive_now(key, cost, self.charges_always()) {
            Some(Ok(decision)) => decision,
            // The in-memory store answers every call and never fails, so
            // neither its breaker opens nor its fail policy applies.
            Some(Err(_)) | None => unreachable!("the in-memory backend decides at once and cannot fail"),
        }
    }
}
