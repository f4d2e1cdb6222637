//! [`RedisBinding`]: one policy on a [`RedisBackend`](crate::RedisBackend),
//! its state keys, and its decisions and per-key operations as script
//! calls.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::cluster_routing::Slot;
use tollgate::backend::BackendError;
use tollgate::backend::BackendErrorKind;
use tollgate::backend::{
    namespace, Answer, Batcher, Binding, BindingPart, Call, CompoundKeys, LeaseAsk, Leased, Receipt,
    Reserved, Scope, Tick,
};
use tollgate::clock::{Clock, SharedClock, SystemClock};
use tollgate::strategy::{
    self, CalendarTicks, CompoundOutcome, GcraState, LimitRate, Outcome, SlidingWindowState, State, Strategy,
};
use tollgate::{Decision, Error, Operation};

use crate::connection::Connection;
use crate::error::backend_error;
use crate::exact::{check_exact, MAX_EXACT_OPERAND};
use crate::reply::{parse_blocked, parse_reply, parse_together, NO_OUTCOME};
use crate::scripts::{self, Functions, LuaScript};

mod holds;
mod lanes;
mod permits;

pub(crate) use lanes::Batched;
use permits::permit_keys;

/// The settings a [`RedisBackend`](crate::RedisBackend) hands to each of
/// its bindings, from its [builder](crate::RedisBackendBuilder).
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) timeout: Duration,
    pub(crate) clock: Option<SharedClock>,
    pub(crate) expiry_grace: Duration,
    /// Whether decisions that find calls in flight go out together.
    pub(crate) batch: bool,
}

/// The one lane of batched calls to a standalone server or Sentinel's
/// primary (in a Cluster, each hash slot is a lane).
const STANDALONE_LANE: Slot = match Slot::new(0) {
    Some(slot) => slot,
    None => panic!("slot 0 exists"),
};

/// Where a binding's state keys live.
enum Layout {
    /// One limit: its namespace followed by the caller's key.
    Single(Vec<u8>),
    /// Several limits: one key each, all in one hash slot.
    Compound(CompoundKeys),
}

struct BindingShared {
    conn: Connection,
    functions: Arc<Functions>,
    /// The backend's lanes of batched calls; `None` when every call goes
    /// out alone.
    batcher: Option<Arc<Batcher<Batched, Slot>>>,
    timeout: Duration,
    clock: Option<SharedClock>,
    script: &'static LuaScript,
    /// What decides several requests in one call: for a policy of one
    /// limit; `None` for several (their batches go through `together`).
    batch_script: Option<&'static LuaScript>,
    layout: Layout,
    limits: Box<[LimitRate]>,
    /// The largest `L` of the limits: every cost above it decides alike.
    max_limit: u64,
    /// The expiry grace in milliseconds, as sent.
    grace_ms: String,
    /// The limits' arguments, as sent after now, the cost and the grace:
    /// `L`, `W` and `T` for one limit; the strategy function, `L`, `W` and
    /// `T` of each limit for several.
    limit_args: Vec<String>,
    /// The script of per-key operations.
    operations: &'static LuaScript,
    /// Each limit's strategy function, `L`, `W` and `T`, as the operations
    /// script takes them.
    operation_args: Vec<String>,
    /// The calendar windows among the limits, with the index of their `W`
    /// in `operation_args` (and `limit_args`, the same for them): a
    /// calendar's `W` is the boundaries around now, made for each call
    /// ([`periods_arg`]).
    calendars: Box<[(usize, CalendarTicks)]>,
}

/// One policy served by a [`RedisBackend`](crate::RedisBackend). Cheap to clone.
#[derive(Clone)]
pub struct RedisBinding {
    shared: Arc<BindingShared>,
}

impl std::fmt::Debug for RedisBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys' pattern, `*` standing for the caller's key.
        let keys: Vec<String> = self
            .state_keys(b"*")
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        f.debug_struct("RedisBinding")
            .field("state_keys", &keys)
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

/// The policy's limits in microsecond ticks, each checked to stay within
/// the scripts' exact arithmetic ([`check_exact`]); an error names the limit
/// of a compound policy (`limits[1]`).
fn exact_limits(policy: &tollgate::Policy) -> Result<Vec<LimitRate>, Error> {
    let mut limits = Vec::with_capacity(policy.limits().len());
    for (i, limit) in policy.limits().iter().enumerate() {
        let rate = limit.rate_micros();
        check_exact(limit.strategy(), &rate).map_err(|err| {
            if policy.is_compound() {
                err.within(format!("limits[{i}]"))
            } else {
                err
            }
        })?;
        limits.push(LimitRate {
            strategy: limit.strategy(),
            rate,
        });
    }
    Ok(limits)
}

/// Every limit's arguments as the operations' entry point (and a compound
/// policy's decision) takes them: its function's name, `L`, `W` and `T`.
fn operation_args(limits: &[LimitRate]) -> Vec<String> {
    limits
        .iter()
        .flat_map(|l| {
            [
                scripts::function_name(l.strategy).to_owned(),
                l.rate.limit.to_string(),
                l.rate.window.to_string(),
                l.rate.interval.to_string(),
            ]
        })
        .collect()
}

impl RedisBinding {
    /// The binding of `scope`'s policy on `conn`: its keys, its scripts and
    /// their arguments, once the policy is found to stay within exact
    /// arithmetic ([`check_exact`]).
    pub(crate) fn new(
        conn: &Connection,
        functions: &Arc<Functions>,
        batcher: &Arc<Batcher<Batched, Slot>>,
        options: &Options,
        scope: &Scope<'_>,
    ) -> Result<Self, Error> {
        let policy = scope.policy;
        let limits = exact_limits(policy)?;
        let calendars: Box<[(usize, CalendarTicks)]> = limits
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((4 * i + 2, l.rate.calendar()?)))
            .collect();
        // A calendar window's `W` is made for each call: it goes through
        // the entry points that take every limit's arguments, whose keys
        // are those of a compound policy.
        let single = policy.single().filter(|_| calendars.is_empty());
        let (script, layout, limit_args) = match single {
            Some(limit) => {
                let rate = limits[0].rate;
                (
                    scripts::single(limit.strategy()),
                    Layout::Single(namespace(scope.prefix, scope.resource, limit.strategy())),
                    vec![
                        rate.limit.to_string(),
                        rate.window.to_string(),
                        rate.interval.to_string(),
                    ],
                )
            }
            None => (
                scripts::compound(),
                Layout::Compound(CompoundKeys::new(scope.prefix, scope.resource, policy.limits())),
                Vec::new(),
            ),
        };
        let operation_args = operation_args(&limits);
        let grace_ms = options.expiry_grace.as_nanos().div_ceil(1_000_000);
        // A compound policy's decision arguments are the operations' ones.
        let limit_args = if limit_args.is_empty() {
            operation_args.clone()
        } else {
            limit_args
        };
        Ok(Self {
            shared: Arc::new(BindingShared {
                conn: conn.clone(),
                functions: Arc::clone(functions),
                batcher: options.batch.then(|| Arc::clone(batcher)),
                timeout: options.timeout,
                clock: options.clock.clone(),
                script,
                batch_script: single.and_then(|limit| scripts::batch(limit.strategy())),
                layout,
                max_limit: limits.iter().map(|l| l.rate.limit).max().unwrap_or(1),
                limits: limits.into_boxed_slice(),
                grace_ms: grace_ms.to_string(),
                limit_args,
                operations: scripts::operations(),
                operation_args,
                calendars,
            }),
        })
    }

    /// The Redis keys that hold the state of `key`, one per limit of the
    /// policy, in its order: `{prefix}:{resource}:{strategy}:{key}` for a
    /// policy of one limit, `{prefix}:{{resource}:{key}}:{strategy}:{window}`
    /// for each limit of a compound policy (all in one Redis Cluster hash
    /// slot). The [key layout](tollgate::_documentation::semantics_notes#key-layout)
    /// describes both.
    pub fn state_keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        match &self.shared.layout {
            Layout::Single(namespace) => vec![[namespace.as_slice(), key].concat()],
            Layout::Compound(keys) => (0..keys.len()).map(|i| keys.key(i, key)).collect(),
        }
    }

    /// The policy's limits with their rates in microsecond ticks, as the
    /// scripts see them.
    pub fn limits(&self) -> &[LimitRate] {
        &self.shared.limits
    }

    /// The SHA-1 of the script that decides for this policy where the
    /// server has no functions, as `EVALSHA` names it (for `SCRIPT EXISTS`,
    /// or to run it by hand).
    pub fn script_sha(&self) -> &str {
        self.shared.script.sha()
    }

    /// The name of the library function that decides for this policy, as
    /// `FCALL` names it (`tollgate_<digest>_<entry point>`; `FUNCTION LIST`
    /// shows its library). See the
    /// [function library](crate::_documentation::operations#scripts-and-the-function-library).
    pub fn function_name(&self) -> &str {
        self.shared.script.function()
    }

    /// Decides `cost` units for `key` in one call of its own.
    async fn decide_one(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let shared = &*self.shared;
        let cost = shared.cost_arg(cost);
        let reply = self
            .invoke(shared.script, key, &cost, &shared.limit_args, None)
            .await?;
        decision_of(&shared.limits, &reply)
    }

    /// Decides `parts` (none: no call; one: a call of its own) in one call:
    /// of the policy's batch entry point when every part is of one policy
    /// of one limit, otherwise of `together`, every part non-decisive.
    async fn decide_many(parts: &[(&RedisBinding, &[u8], u64)]) -> Result<Vec<Decision>, BackendError> {
        match parts {
            [] => return Ok(Vec::new()),
            [(binding, key, cost)] => return Ok(vec![binding.decide_one(key, *cost).await?]),
            _ => {}
        }
        let first = &parts[0].0.shared;
        if let Some(script) = first.batch_script {
            if parts.iter().all(|p| Arc::ptr_eq(&p.0.shared, first)) {
                return RedisBinding::call_batch(first, script, parts).await;
            }
        }
        let parts: Vec<BindingPart<'_, RedisBinding>> = parts
            .iter()
            .map(|&(binding, key, cost)| BindingPart {
                binding,
                key,
                cost,
                decisive: false,
            })
            .collect();
        let state_keys: Vec<Vec<u8>> = parts.iter().flat_map(|p| p.binding.state_keys(p.key)).collect();
        RedisBinding::call_together(&parts[0].binding.shared, &parts, &state_keys).await
    }

    /// Decides `parts`, all of one policy of one limit, in one call of
    /// its batch entry point.
    async fn call_batch(
        shared: &BindingShared,
        script: &LuaScript,
        parts: &[(&RedisBinding, &[u8], u64)],
    ) -> Result<Vec<Decision>, BackendError> {
        let keys: Vec<Vec<u8>> = parts
            .iter()
            .map(|&(binding, key, _)| binding.state_keys(key).remove(0))
            .collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let now = shared.now_arg();
        // One cost for the whole batch when every decision has the same
        // (the script reads it for each): one argument per decision less.
        let first_cost = parts[0].2;
        let costs: Vec<String> = if parts.iter().all(|p| p.2 == first_cost) {
            vec![shared.cost_arg(first_cost)]
        } else {
            parts.iter().map(|p| shared.cost_arg(p.2)).collect()
        };
        let limit_args = shared.with_periods(&shared.limit_args);
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 + limit_args.len() + costs.len());
        args.extend([now.as_bytes(), shared.grace_ms.as_bytes()]);
        args.extend(limit_args.iter().map(String::as_bytes));
        args.extend(costs.iter().map(String::as_bytes));
        let reply = shared.call(script, &keys, &args).await?;
        let bad = || {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the batch script: {reply:?}"),
            )
        };
        if reply.len() != 4 * parts.len() {
            return Err(bad());
        }
        reply
            .chunks_exact(4)
            .map(|answer| match *answer {
                [-1, left, reset, _] => {
                    parse_blocked(&[-1, left, reset], shared.limits[0].rate.limit)?.ok_or_else(bad)
                }
                _ => {
                    let mut outcome = [NO_OUTCOME];
                    let outcomes = parse_reply(answer, &mut outcome)?;
                    Ok(Decision::from_compound(
                        strategy::combine(outcomes),
                        &shared.limits,
                        Tick::Micros,
                    ))
                }
            })
            .collect()
    }

    /// See [`Call::Together`]: one call of the `together` entry
    /// point when every part is served by one backend and, in a cluster,
    /// every state key lives in one hash slot.
    async fn together(
        parts: &[BindingPart<'_, RedisBinding>],
    ) -> Option<Result<Vec<Decision>, BackendError>> {
        let first = &*parts.first()?.binding.shared;
        // The bindings of one backend share its record of functions.
        if !parts
            .iter()
            .all(|p| Arc::ptr_eq(&p.binding.shared.functions, &first.functions))
        {
            return None;
        }
        let state_keys: Vec<Vec<u8>> = parts.iter().flat_map(|p| p.binding.state_keys(p.key)).collect();
        if first.conn.is_cluster() {
            let slot = Slot::for_key(&state_keys[0]);
            if !state_keys.iter().all(|k| Slot::for_key(k) == slot) {
                return None;
            }
        }
        Some(Self::call_together(first, parts, &state_keys).await)
    }

    async fn call_together(
        first: &BindingShared,
        parts: &[BindingPart<'_, RedisBinding>],
        state_keys: &[Vec<u8>],
    ) -> Result<Vec<Decision>, BackendError> {
        let now = first.now_arg();
        // Each part's cost and limit count, as sent.
        let numbers: Vec<(String, String)> = parts
            .iter()
            .map(|p| {
                let shared = &p.binding.shared;
                (shared.cost_arg(p.cost), shared.limits.len().to_string())
            })
            .collect();
        let count = parts.len().to_string();
        let limit_args: Vec<_> = parts
            .iter()
            .map(|p| p.binding.shared.with_periods(&p.binding.shared.operation_args))
            .collect();
        let mut args: Vec<&[u8]> = vec![now.as_bytes(), first.grace_ms.as_bytes(), count.as_bytes()];
        for ((part, (cost, limits)), limit_args) in parts.iter().zip(&numbers).zip(&limit_args) {
            args.extend([
                cost.as_bytes(),
                if part.decisive { b"1" } else { b"0" },
                limits.as_bytes(),
            ]);
            args.extend(limit_args.iter().map(String::as_bytes));
        }
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let reply = first.call(scripts::together(), &keys, &args).await?;
        parse_together(&reply, parts.iter().map(|p| p.binding.limits()))
    }

    /// See [`Call::Lease`]: one call of the `lease` entry point on the
    /// key's state keys and, when it asks for a lease, its set of lessees.
    async fn lease_keys(&self, key: &[u8], ask: LeaseAsk) -> Result<Leased, BackendError> {
        let shared = &*self.shared;
        let mut state_keys = self.state_keys(key);
        let n = state_keys.len();
        if ask.want > 0 {
            if let Some(lessees) = lessees_key(&state_keys[0]) {
                state_keys.push(lessees);
            }
        }
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let cost = shared.cost_arg(ask.cost);
        let tail = [
            ask.want.min(MAX_EXACT_OPERAND).to_string(),
            ask.lessee.to_string(),
            micros(ask.max_age).max(1).to_string(),
            ask.returning.min(MAX_EXACT_OPERAND).to_string(),
            if ask.return_before >= MAX_EXACT_OPERAND {
                "-1".to_owned()
            } else {
                ask.return_before.to_string()
            },
            n.to_string(),
        ];
        let reply = shared.call_limits(scripts::lease(), &keys, &cost, &tail).await?;
        if let Some(blocked) = parse_blocked(&reply, shared.limits[0].rate.limit)? {
            return Ok(Leased::new(blocked, 0, None, u64::MAX));
        }
        let bad = || {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the lease script: {reply:?}"),
            )
        };
        let (decided, lease) = reply.split_at_checked(4 * n).ok_or_else(bad)?;
        let &[extra, window_end, window_left, return_before] = lease else {
            return Err(bad());
        };
        let mut outcomes = [NO_OUTCOME; tollgate::Policy::MAX_LIMITS];
        let outcomes = parse_reply(decided, &mut outcomes[..n])?;
        let decision = Decision::from_compound(strategy::combine(outcomes), &shared.limits, Tick::Micros);
        let extra = u64::try_from(extra).map_err(|_| bad())?;
        let window_left = match (window_end, window_left) {
            (-1, -1) => None,
            (_, left) => Some(Duration::from_micros(u64::try_from(left).map_err(|_| bad())?)),
        };
        let return_before = match return_before {
            -1 => u64::MAX,
            before => u64::try_from(before).map_err(|_| bad())?,
        };
        Ok(Leased::new(decision, extra, window_left, return_before))
    }

    /// See [`Call::Reserve`]: one call of the `reserve` entry point.
    async fn reserve_keys(
        &self,
        key: &[u8],
        cost: u64,
        max_delay: Duration,
    ) -> Result<Reserved, BackendError> {
        let shared = &*self.shared;
        let state_keys = self.state_keys(key);
        let n = state_keys.len();
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let micros = u64::try_from(max_delay.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_EXACT_OPERAND);
        let amount = shared.cost_arg(cost);
        let reply = shared
            .call_limits(scripts::reserve(), &keys, &amount, &[micros.to_string()])
            .await?;
        if let Some(blocked) = parse_blocked(&reply, shared.limits[0].rate.limit)? {
            return Ok(Reserved::new(blocked, Duration::ZERO, None));
        }
        let bad = || {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the reservation script: {reply:?}"),
            )
        };
        let (decided, tail) = reply.split_at_checked(4 * n).ok_or_else(bad)?;
        let (&[status, wait, bound, now], left) = tail.split_at_checked(4).ok_or_else(bad)? else {
            return Err(bad());
        };
        if left.len() != 3 * n {
            return Err(bad());
        }
        let mut outcomes = [NO_OUTCOME; tollgate::Policy::MAX_LIMITS];
        let outcomes = parse_reply(decided, &mut outcomes[..n])?;
        let wait = u64::try_from(wait).map_err(|_| bad())?;
        let compound = match status {
            0 | 1 => strategy::combine(outcomes),
            // Refused, beyond the longest wait or until a sliding window
            // turns: the peek's numbers, denied by the limit that bound it.
            2 | 3 => CompoundOutcome {
                outcome: Outcome {
                    allowed: false,
                    retry_after: Some(wait),
                    ..strategy::combine(outcomes).outcome
                },
                bound_by: usize::try_from(bound).ok().filter(|&i| i < n).ok_or_else(bad)?,
            },
            _ => return Err(bad()),
        };
        let decision = Decision::from_compound(compound, &shared.limits, Tick::Micros);
        match status {
            1 => {}
            2 => return Ok(Reserved::beyond_max_delay(decision)),
            _ => return Ok(Reserved::new(decision, Duration::ZERO, None)),
        }
        let mut states = [None; tollgate::Policy::MAX_LIMITS];
        for ((state, left), limit) in states.iter_mut().zip(left.chunks_exact(3)).zip(&shared.limits) {
            let [a, b, c] = [left[0], left[1], left[2]].map(u64::try_from);
            let (Ok(a), Ok(b), Ok(c)) = (a, b, c) else {
                return Err(bad());
            };
            *state = Some(match limit.strategy {
                Strategy::SlidingWindow => State::SlidingWindow(SlidingWindowState {
                    start: a,
                    curr: b,
                    prev: c,
                }),
                _ => State::Gcra(GcraState { tat: a }),
            });
        }
        let now = u64::try_from(now).map_err(|_| bad())?;
        let receipt = Receipt::new(cost, now + wait, &states[..n]);
        Ok(Reserved::new(
            decision,
            Duration::from_micros(wait),
            Some(receipt),
        ))
    }

    /// See [`Call::Cancel`]: one call of the `cancel` entry point.
    async fn cancel_keys(&self, key: &[u8], receipt: &Receipt) -> Result<bool, BackendError> {
        let shared = &*self.shared;
        let state_keys = self.state_keys(key);
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let mut tail = vec![receipt.proceed().to_string()];
        for state in receipt.states() {
            let numbers = match state {
                Some(State::Gcra(GcraState { tat })) => [*tat, 0, 0],
                Some(State::SlidingWindow(SlidingWindowState { start, curr, prev })) => {
                    [*start, *curr, *prev]
                }
                _ => return Ok(false),
            };
            tail.extend(numbers.map(|x| x.to_string()));
        }
        let amount = receipt.cost().min(MAX_EXACT_OPERAND).to_string();
        let reply = shared
            .call_limits(scripts::cancel(), &keys, &amount, &tail)
            .await?;
        match reply[..] {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the cancel script: {reply:?}"),
            )),
        }
    }

    /// See [`Call::Reconnect`]: a `PING`, and another on the new
    /// connection when the first failed on a broken one (which starts the
    /// reconnection), both within one decision timeout. A reconnection that
    /// takes longer goes on in the background (the clients reconnect by
    /// themselves) and the next probe meets it; the caller never waits for
    /// a connection attempt past the timeout.
    async fn ping_twice(&self) -> Result<(), BackendError> {
        let shared = &self.shared;
        let deadline = tokio::time::Instant::now() + shared.timeout;
        let ping = || async move {
            tokio::time::timeout_at(deadline, shared.conn.query::<String>(&redis::cmd("PING")))
                .await
                .map_err(|_| BackendError::timeout(shared.timeout))?
                .map_err(backend_error)
        };
        if ping().await.is_ok() {
            return Ok(());
        }
        ping().await.map(drop)
    }

    /// Decides `cost` units for `key` and charges them whether admitted or
    /// not (usage reported after the fact), in one call of the compound
    /// entry point with the units to charge after every limit: the
    /// admission test sees the cost clamped as every decision's is, the
    /// charge the cost itself.
    async fn charge_keys(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let shared = &*self.shared;
        if cost > MAX_EXACT_OPERAND {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!(
                    "a report of {cost} units exceeds 2^51 = {MAX_EXACT_OPERAND}, the largest the Redis \
                     backend charges, within which its scripts compute exactly (Lua numbers are doubles)"
                ),
            ));
        }
        let (tested, amount) = (shared.cost_arg(cost), cost.to_string());
        let reply = self
            .invoke(
                scripts::compound(),
                key,
                &tested,
                &shared.operation_args,
                Some(&amount),
            )
            .await?;
        if let Some(blocked) = parse_blocked(&reply, shared.limits[0].rate.limit)? {
            return Ok(blocked);
        }
        let bad = || {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply to a report from the compound script: {reply:?}"),
            )
        };
        let (&admitted, rows) = reply.split_last().ok_or_else(bad)?;
        let mut outcomes = [NO_OUTCOME; tollgate::Policy::MAX_LIMITS];
        let outcomes = parse_reply(rows, &mut outcomes[..shared.limits.len()])?;
        let mut compound = strategy::combine(outcomes);
        match admitted {
            1 => {}
            // The state after the charge, read as a peek reads it; the
            // usage did not fit.
            0 => compound.outcome.allowed = false,
            _ => return Err(bad()),
        }
        Ok(Decision::from_compound(compound, &shared.limits, Tick::Micros))
    }

    /// Applies `op` to every state key of `key` in one script call (and a
    /// reset deletes the key's holds too, or a concurrency limit's
    /// permits).
    async fn operate_keys(&self, key: &[u8], op: Operation) -> Result<(), BackendError> {
        let shared = &*self.shared;
        let (name, amount) = operation_amount(op)?;
        let amount = amount.to_string();
        let mut state_keys = self.state_keys(key);
        if op == Operation::Reset {
            let beside = if self.is_concurrency() {
                permit_keys(&state_keys[0])
            } else {
                holds::hold_keys(&state_keys[0])
            };
            state_keys.extend(beside);
        }
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let reply = shared
            .call_limits(shared.operations, &keys, &amount, &[name.to_owned()])
            .await?;
        if reply != [0] {
            return Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the operations script: {reply:?}"),
            ));
        }
        Ok(())
    }

    /// Whether the policy is a concurrency limit (its only limit): its
    /// calls go to [`RedisBinding::call_permits`].
    fn is_concurrency(&self) -> bool {
        self.shared.limits[0].strategy == Strategy::Concurrency
    }

    /// Runs `script` on the state keys of `key` with now, `amount`, the
    /// grace, `limit_args` and `last` as arguments, within the timeout.
    async fn invoke(
        &self,
        script: &LuaScript,
        key: &[u8],
        amount: &str,
        limit_args: &[String],
        last: Option<&str>,
    ) -> Result<Vec<i64>, BackendError> {
        let shared = &*self.shared;
        let state_keys = self.state_keys(key);
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let now = shared.now_arg();
        let limit_args = shared.with_periods(limit_args);
        let mut args: Vec<&[u8]> = Vec::with_capacity(4 + limit_args.len());
        args.extend([now.as_bytes(), amount.as_bytes(), shared.grace_ms.as_bytes()]);
        args.extend(limit_args.iter().map(String::as_bytes));
        args.extend(last.map(str::as_bytes));
        shared.call(script, &keys, &args).await
    }
}

impl BindingShared {
    /// A cost as the scripts receive it. Every cost above a limit decides
    /// alike for it (denied, nothing charged, no retry), so clamping above
    /// the largest keeps the argument exact.
    fn cost_arg(&self, cost: u64) -> String {
        cost.min(self.max_limit + 1).to_string()
    }

    /// `args` (`limit_args` or `operation_args`) with each calendar
    /// window's `W` made for now on the caller's clock (the system clock
    /// when the server's decides: only the period the server's now falls
    /// in must be among those sent).
    fn with_periods<'a>(&self, args: &'a [String]) -> Cow<'a, [String]> {
        if self.calendars.is_empty() {
            return Cow::Borrowed(args);
        }
        let nanos = self
            .clock
            .as_ref()
            .map_or_else(|| SystemClock.now_nanos(), |c| c.now_nanos());
        let now = Tick::Micros.from_nanos(nanos);
        let mut args = args.to_vec();
        for (index, calendar) in &*self.calendars {
            args[*index] = periods_arg(calendar, now);
        }
        Cow::Owned(args)
    }

    /// The scripts' first argument: now in microseconds on the caller's
    /// clock, or empty for the server's.
    fn now_arg(&self) -> String {
        match &self.clock {
            Some(clock) => Tick::Micros.from_nanos(clock.now_nanos()).to_string(),
            None => String::new(),
        }
    }

    /// Runs `script`, an entry point that takes every limit's arguments, on
    /// `keys`: now, `amount`, the grace, each limit's strategy function,
    /// `L`, `W` and `T`, then `tail`.
    async fn call_limits(
        &self,
        script: &LuaScript,
        keys: &[&[u8]],
        amount: &str,
        tail: &[String],
    ) -> Result<Vec<i64>, BackendError> {
        let now = self.now_arg();
        let operation_args = self.with_periods(&self.operation_args);
        let mut args: Vec<&[u8]> = Vec::with_capacity(3 + operation_args.len() + tail.len());
        args.extend([now.as_bytes(), amount.as_bytes(), self.grace_ms.as_bytes()]);
        args.extend(operation_args.iter().map(String::as_bytes));
        args.extend(tail.iter().map(String::as_bytes));
        self.call(script, keys, &args).await
    }

    /// Runs `script` on `keys` with `args` once the connection is ready,
    /// all within the timeout.
    async fn call(
        &self,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Vec<i64>, BackendError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let conn = self.conn.ready(deadline).await.map_err(|err| {
            BackendError::new(BackendErrorKind::Unavailable, err.to_string()).with_source(err)
        })?;
        tokio::time::timeout_at(deadline, script.run(conn, &self.functions, keys, args))
            .await
            .map_err(|_| BackendError::timeout(self.timeout))?
            .map_err(backend_error)
    }
}

/// The operations script's name of `op` and its amount: the cost of a
/// refund or penalty, the length of a block in microseconds (rounded down,
/// as the store adapter's ticks are), 0 for a reset.
///
/// # Errors
///
/// A cost above [`MAX_EXACT_OPERAND`], beyond which the script's arithmetic
/// would not be exact, as [`BackendErrorKind::Unsupported`]. (The limiter
/// has already refused costs and blocks beyond the core's bounds; a block of
/// at most 100 years stays exact.)
fn operation_amount(op: Operation) -> Result<(&'static str, u64), BackendError> {
    match op {
        Operation::Reset => Ok(("reset", 0)),
        Operation::Block(d) => Ok((
            "block",
            Tick::Micros.from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )),
        Operation::Refund(cost) | Operation::Penalty(cost) if cost > MAX_EXACT_OPERAND => {
            Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!(
                    "{} cost {cost} exceeds 2^51 = {MAX_EXACT_OPERAND}, the largest cost of a \
                     per-key operation on the Redis backend, within which its scripts compute \
                     exactly (Lua numbers are doubles)",
                    op.name()
                ),
            ))
        }
        Operation::Refund(cost) => Ok(("refund", cost)),
        Operation::Penalty(cost) => Ok(("penalty", cost)),
        _ => Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("the Redis backend does not know the operation {}", op.name()),
        )),
    }
}

/// The key of the set of processes leasing the rate-limit key whose first
/// state key is `state_key`, in that key's Redis Cluster hash slot
/// ([`beside`]); `None` for a state key without a tag that holds a `}` (a
/// caller's key may), whose lessees are then not counted (the store takes
/// each lease as from the only process, which only makes it larger; the
/// bounds do not depend on it).
fn lessees_key(state_key: &[u8]) -> Option<Vec<u8>> {
    beside(state_key, b":lessees")
}

/// A key named after `state_key` and ending in `suffix`, in the state key's
/// Redis Cluster hash slot: the state key followed by `suffix` when it has
/// a hash tag (a compound policy's keys), else the state key in braces (as
/// the hash tag) followed by `suffix`; `None` for a state key without a tag
/// that holds a `}`, which braces cannot enclose.
fn beside(state_key: &[u8], suffix: &[u8]) -> Option<Vec<u8>> {
    let tagged = state_key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| state_key[open + 1..].iter().position(|&b| b == b'}'))
        .is_some_and(|len| len > 0);
    if tagged {
        return Some([state_key, suffix].concat());
    }
    if state_key.contains(&b'}') {
        return None;
    }
    Some([b"{", state_key, b"}", suffix].concat())
}

/// Keys named after `state_key`, one ending in each of `suffixes`, in its
/// hash slot: as [`beside`] names them, or, for a state key without a tag
/// that holds a `}`, `{<digits>}:<state key><suffix>` with a tag of decimal
/// digits in its slot ([`slot_tag`]).
fn keys_beside<const N: usize>(state_key: &[u8], suffixes: [&[u8]; N]) -> [Vec<u8>; N] {
    suffixes.map(|suffix| {
        beside(state_key, suffix).unwrap_or_else(|| {
            let tag = slot_tag(Slot::for_key(state_key));
            [b"{", tag.as_bytes(), b"}:", state_key, suffix].concat()
        })
    })
}

/// The smallest decimal number whose digits hash to `slot`: a hash tag
/// that puts a key in that slot. The table of every slot's is built once,
/// from the first numbers (about 160,000 of them cover the 16,384 slots).
fn slot_tag(slot: Slot) -> &'static str {
    static TAGS: OnceLock<HashMap<Slot, String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = HashMap::with_capacity(SLOTS);
        for n in 0u32.. {
            let tag = n.to_string();
            tags.entry(Slot::for_key(&tag)).or_insert(tag);
            if tags.len() == SLOTS {
                break;
            }
        }
        tags
    });
    &tags[&slot]
}

/// The number of Redis Cluster hash slots.
const SLOTS: usize = 16_384;

impl Binding for RedisBinding {
    /// One function call (or script) per call, for every limit of the
    /// policy: a decision batched with others under load, a report
    /// (charge) in a call of its own (it is rarer, and its reply carries
    /// one more number), a lease that also counts the process among the
    /// key's lessees (a sorted set beside its state, in its hash slot),
    /// and several parts in one call on a standalone server, through
    /// Sentinel, or in a cluster when every state key lives in one hash
    /// slot ([`Answer::Apart`] otherwise, and for parts of different
    /// backends). A reconnection is a `PING`, and when it fails a second
    /// one: the first command on a connection that an outage broke fails
    /// and starts the reconnection, and the second waits for that attempt
    /// (within the connect timeout), so the probe's decision that follows
    /// goes out on a live connection as soon as the server accepts again.
    /// A concurrency limit's operations on permits (its plain decisions
    /// too) are one call each of the permits entry point, batched under
    /// load as decisions are: several in one call, each answered exactly
    /// as alone. A hold is one call that decides its
    /// estimate and records it beside the key's first state key, in its
    /// hash slot; a settle is one call that takes it out and gives back or
    /// charges the difference on every limit.
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        if self.is_concurrency() {
            return self.call_permits(call).await;
        }
        Ok(match call {
            Call::Decide { key, cost } => Answer::Decided(self.run(key, cost).await?),
            Call::Charge { key, cost } => Answer::Decided(self.charge_keys(key, cost).await?),
            Call::Lease { key, ask } => Answer::Leased(self.lease_keys(key, ask).await?),
            Call::Reserve { key, cost, max_delay } => {
                Answer::Reserved(Box::new(self.reserve_keys(key, cost, max_delay).await?))
            }
            Call::Cancel { key, receipt } => Answer::Cancelled(self.cancel_keys(key, receipt).await?),
            Call::Operate { key, op } => {
                self.operate_keys(key, op).await?;
                Answer::Done
            }
            Call::Together(parts) => match Self::together(parts).await {
                Some(decisions) => Answer::Decisions(decisions?),
                None => Answer::Apart,
            },
            Call::Reconnect => {
                self.ping_twice().await?;
                Answer::Done
            }
            Call::Hold { key, id, estimate } => Answer::Decided(self.hold_keys(key, id, estimate).await?),
            Call::Settle { key, id, used } => Answer::Settled(self.settle_keys(key, id, used).await?),
            Call::Permit { .. } => return Err(call.unsupported()),
        })
    }
}

/// The decision a script's reply gives under `limits`: a blocked key's, or
/// the limits' outcomes (four numbers each) combined.
fn decision_of(limits: &[LimitRate], reply: &[i64]) -> Result<Decision, BackendError> {
    if let Some(blocked) = parse_blocked(reply, limits[0].rate.limit)? {
        return Ok(blocked);
    }
    let mut outcomes = [NO_OUTCOME; tollgate::Policy::MAX_LIMITS];
    let outcomes = parse_reply(reply, &mut outcomes[..limits.len()])?;
    Ok(Decision::from_compound(
        strategy::combine(outcomes),
        limits,
        Tick::Micros,
    ))
}

/// A calendar window's `W` as the scripts take it: the boundaries of the
/// period before the one that holds `now` (microseconds), of that period
/// and of the one after, `"b1,b2,b3,b4"`. The script decides in the period
/// that holds the server's now, which may be a period before or after the
/// caller's when the two clocks straddle a boundary.
fn periods_arg(calendar: &CalendarTicks, now: u64) -> String {
    let (start, end) = calendar.period_at(now);
    let before = calendar.period_at(start.saturating_sub(1)).0;
    let after = calendar.period_at(end).1;
    format!("{before},{start},{end},{after}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_beyond_exact_costs_are_refused_and_blocks_round_down() {
        let err = operation_amount(Operation::Refund(MAX_EXACT_OPERAND + 1)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Unsupported);
        assert_eq!(
            operation_amount(Operation::Block(Duration::from_nanos(2_999))).unwrap(),
            ("block", 2)
        );
    }
}
