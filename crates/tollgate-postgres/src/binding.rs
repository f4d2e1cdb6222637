//! [`PostgresBinding`]: one policy on a [`PostgresBackend`](crate::PostgresBackend),
//! its state keys, and its decisions and operations as calls of the
//! schema's functions.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;
use tollgate::backend::{
    namespace, Answer, BackendError, BackendErrorKind, Batcher, Binding, Call, CompoundKeys, Decider, Scope,
    Tick,
};
use tollgate::clock::SharedClock;
use tollgate::strategy::{self, LimitRate, Outcome};
use tollgate::{Decision, Error, Operation, Policy};

use crate::error::{backend_error, pool_error};
use crate::install::Installer;
use crate::limits::{operation_amount, Limits};

mod leases;
mod reservations;
mod together;

/// The settings a backend hands to each of its bindings.
#[derive(Clone)]
pub(crate) struct Options {
    /// The schema's name, checked to need no quoting.
    pub(crate) schema: Arc<str>,
    pub(crate) timeout: Duration,
    pub(crate) clock: Option<SharedClock>,
    pub(crate) grace_micros: u64,
    /// Whether the schema is installed, shared by every binding.
    pub(crate) installer: Arc<Installer>,
    /// The lanes of batched decisions (one per policy), when on.
    pub(crate) batcher: Option<Arc<Batcher<PostgresBinding, usize>>>,
}

/// One policy bound to a [`PostgresBackend`](crate::PostgresBackend):
/// each decision one call of the schema's `decide` function, each
/// operation one call of `operate`, on the policy's state keys (one row
/// per limit). Cloning is cheap.
#[derive(Clone)]
pub struct PostgresBinding {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    options: Options,
    limits: Limits,
    layout: Layout,
    decide_sql: String,
    operate_sql: String,
    reserve_sql: String,
    cancel_sql: String,
    lease_sql: String,
    together_sql: String,
}

/// Where a policy's state keys live: one namespace for a policy of one
/// limit, a key per limit for a compound policy (the key layout Redis
/// uses).
enum Layout {
    Single(Vec<u8>),
    Compound(CompoundKeys),
}

impl std::fmt::Debug for PostgresBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self
            .state_keys(b"*")
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        f.debug_struct("PostgresBinding")
            .field("schema", &self.shared.options.schema)
            .field("state_keys", &keys)
            .field("limits", &self.shared.limits.rates)
            .finish_non_exhaustive()
    }
}

impl PostgresBinding {
    /// The binding of `scope`'s policy on `pool`.
    pub(crate) fn new(pool: &Pool, options: &Options, scope: &Scope<'_>) -> Result<Self, Error> {
        let policy: &Policy = scope.policy;
        let limits = Limits::of(policy)?;
        let layout = match policy.single() {
            Some(limit) => Layout::Single(namespace(scope.prefix, scope.resource, limit.strategy())),
            None => Layout::Compound(CompoundKeys::new(scope.prefix, scope.resource, policy.limits())),
        };
        let schema = &options.schema;
        let decide = if limits.is_one_fixed_window() {
            "decide_fixed_window"
        } else {
            "decide"
        };
        Ok(Self {
            shared: Arc::new(Shared {
                pool: pool.clone(),
                options: options.clone(),
                limits,
                layout,
                decide_sql: call_sql(schema, decide, &["int8[]", "int8"]),
                operate_sql: call_sql(schema, "operate", &["text", "int8"]),
                reserve_sql: call_sql(schema, "reserve", &["int8", "int8"]),
                cancel_sql: call_sql(schema, "cancel", &["int8", "int8", "int8[]"]),
                lease_sql: call_sql(schema, "lease", &["int8"; 6]),
                together_sql: call_sql(schema, "together", &["int8[]", "bool[]", "int4[]"]),
            }),
        })
    }

    /// The rows that hold the state of `key`, one per limit of the policy,
    /// in its order: `{prefix}:{resource}:{strategy}:{key}` for a policy of
    /// one limit, `{prefix}:{{resource}:{key}}:{strategy}:{window}` for each
    /// limit of a compound policy.
    pub fn state_keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        match &self.shared.layout {
            Layout::Single(namespace) => vec![[namespace.as_slice(), key].concat()],
            Layout::Compound(keys) => (0..keys.len()).map(|i| keys.key(i, key)).collect(),
        }
    }

    /// The policy's limits in microsecond ticks, as the functions see them.
    pub fn limits(&self) -> &[LimitRate] {
        &self.shared.limits.rates
    }

    /// Decides `cost` units for `key`; with `charge`, charges that many
    /// units whatever the decision (usage reported after the fact).
    async fn decide(&self, key: &[u8], cost: u64, charge: Option<u64>) -> Result<Decision, BackendError> {
        let shared = &*self.shared;
        let keys = self.state_keys(key);
        let cost = shared.limits.cost(cost);
        let charge = charge.map(|c| c.min(crate::limits::MAX_OPERAND) as i64);
        let rows = shared
            .run(&shared.decide_sql, &keys, &[&vec![cost], &charge])
            .await?;
        let reply = reply_of(&rows, "decide")?;
        let rates = &shared.limits.rates;
        match charge {
            None => decision_of(rates, &reply),
            Some(_) => {
                let (&admitted, rest) = reply.split_last().ok_or_else(|| unexpected("decide", &reply))?;
                if let Some(blocked) = blocked(rates, rest, "decide")? {
                    return Ok(blocked);
                }
                let mut compound = strategy::combine(&outcomes(rates, rest, "decide")?);
                match admitted {
                    1 => {}
                    // The state after the charge, read as a peek reads it;
                    // the usage did not fit.
                    0 => compound.outcome.allowed = false,
                    _ => return Err(unexpected("decide", &reply)),
                }
                Ok(Decision::from_compound(compound, rates, Tick::Micros))
            }
        }
    }

    /// Decides `cost` units for `key`: alone, or together with the
    /// decisions of the same policy waiting for its calls in flight (see
    /// [`Batcher`]).
    async fn run(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let options = &self.shared.options;
        match &options.batcher {
            // A lane per policy: one call decides requests of one policy.
            Some(batcher) => {
                let lane = Arc::as_ptr(&self.shared) as usize;
                Batcher::decide(batcher, lane, self, key, cost, options.timeout).await
            }
            None => self.decide(key, cost, None).await,
        }
    }

    /// Applies `op` to every state key of `key` in one call.
    async fn operate(&self, key: &[u8], op: Operation) -> Result<(), BackendError> {
        let shared = &*self.shared;
        let (name, amount) = operation_amount(op)?;
        let keys = self.state_keys(key);
        shared
            .run(&shared.operate_sql, &keys, &[&name, &amount])
            .await
            .map(drop)
    }
}

impl Shared {
    /// Runs `sql`, a call of one of the schema's functions
    /// ([`call_sql`]), on `keys` with the arguments `own`, within the
    /// timeout (waiting for a connection included): every limit's numbers
    /// first, then the keys, `own`, the grace and the caller's clock (NULL:
    /// the database's).
    async fn run(
        &self,
        sql: &str,
        keys: &[Vec<u8>],
        own: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, BackendError> {
        let spans = self.limits.spans(self.options.clock.as_ref());
        let l = &self.limits;
        self.run_on([&l.kinds, &l.lims, &l.wins, &l.intvs, &spans], sql, keys, own)
            .await
    }

    /// Runs `sql` as [`run`](Self::run) does, with the limits' numbers
    /// given (kinds, L, W, T, calendar spans): those of several policies,
    /// for a call on the parts of a request.
    async fn run_on(
        &self,
        limits: [&(dyn ToSql + Sync); 5],
        sql: &str,
        keys: &[Vec<u8>],
        own: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, BackendError> {
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let grace = self.options.grace_micros.min(i64::MAX as u64) as i64;
        let at = self
            .options
            .clock
            .as_ref()
            .map(|c| Tick::Micros.from_nanos(c.now_nanos()) as i64);
        let mut params: Vec<&(dyn ToSql + Sync)> = limits.to_vec();
        params.push(&keys);
        params.extend_from_slice(own);
        params.extend_from_slice(&[&grace, &at]);
        let timeout = self.options.timeout;
        let work = async {
            self.options.installer.ensure(&self.pool, timeout).await?;
            let client = self.pool.get().await.map_err(|e| pool_error(e, timeout))?;
            let statement = client.prepare_cached(sql).await.map_err(backend_error)?;
            client.query(&statement, &params[..]).await.map_err(backend_error)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| BackendError::timeout(timeout))?
    }

    /// Whether the server answers: one round trip on a pooled connection.
    async fn ping(&self) -> Result<(), BackendError> {
        let timeout = self.options.timeout;
        let work = async {
            let client = self.pool.get().await.map_err(|e| pool_error(e, timeout))?;
            client
                .simple_query("SELECT 1")
                .await
                .map_err(backend_error)
                .map(drop)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| BackendError::timeout(timeout))?
    }
}

impl Decider for PostgresBinding {
    type Ask = u64;
    type Answer = Decision;

    async fn decide_alone(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        self.decide(key, cost, None).await
    }

    /// One call of `decide` for every part, all of one policy (the lane's),
    /// in order: each request on its own keys and with its own cost.
    async fn decide_batch(parts: &[(&Self, &[u8], u64)]) -> Result<Vec<Decision>, BackendError> {
        let shared = &*parts[0].0.shared;
        let keys: Vec<Vec<u8>> = parts.iter().flat_map(|p| p.0.state_keys(p.1)).collect();
        let costs: Vec<i64> = parts.iter().map(|p| shared.limits.cost(p.2)).collect();
        let rows = shared
            .run(&shared.decide_sql, &keys, &[&costs, &None::<i64>])
            .await?;
        let reply = reply_of(&rows, "decide")?;
        let rates = &shared.limits.rates;
        if reply.len() != 4 * rates.len() * parts.len() {
            return Err(unexpected("decide", &reply));
        }
        reply
            .chunks_exact(4 * rates.len())
            .map(|one| decision_of(rates, one))
            .collect()
    }
}

impl Binding for PostgresBinding {
    /// One call of the schema's `decide` for a decision or a report (its
    /// limits decided as one step, in a transaction that locks the key's
    /// rows), one of `operate` for an operation, of `reserve`, `cancel`
    /// or `lease` for a reservation, its cancel or a lease, of `together`
    /// for the parts of a request on one backend, and a round trip for a
    /// reconnection. The rest the backend does not answer.
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        Ok(match call {
            Call::Decide { key, cost } => Answer::Decided(self.run(key, cost).await?),
            Call::Charge { key, cost } => Answer::Decided(self.decide(key, cost, Some(cost)).await?),
            Call::Operate { key, op } => {
                self.operate(key, op).await?;
                Answer::Done
            }
            Call::Reserve { key, cost, max_delay } => {
                Answer::Reserved(Box::new(self.reserve(key, cost, max_delay).await?))
            }
            Call::Cancel { key, receipt } => Answer::Cancelled(self.cancel(key, receipt).await?),
            Call::Lease { key, ask } => Answer::Leased(self.lease(key, ask).await?),
            Call::Together(parts) => match Self::together(parts).await {
                Some(decisions) => Answer::Decisions(decisions?),
                None => Answer::Apart,
            },
            Call::Reconnect => {
                self.shared.ping().await?;
                Answer::Done
            }
            other => return Err(other.unsupported()),
        })
    }
}

/// The statement that calls the schema's function `name` with a policy's
/// limits (kinds, L, W, T, calendar spans) and state keys, then arguments
/// of the types `own`, then the grace and the caller's clock.
fn call_sql(schema: &str, name: &str, own: &[&str]) -> String {
    let args: Vec<String> = ["int2[]", "int8[]", "int8[]", "int8[]", "int8[]", "bytea[]"]
        .iter()
        .chain(own)
        .chain(&["int8", "int8"])
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}", i + 1))
        .collect();
    format!("SELECT {schema}.{name}({})", args.join(", "))
}

/// The decision a `decide` reply gives under `limits`: a blocked key's, or
/// the limits' outcomes (four numbers each) combined.
fn decision_of(limits: &[LimitRate], reply: &[i64]) -> Result<Decision, BackendError> {
    if let Some(blocked) = blocked(limits, reply, "decide")? {
        return Ok(blocked);
    }
    Ok(Decision::from_compound(
        strategy::combine(&outcomes(limits, reply, "decide")?),
        limits,
        Tick::Micros,
    ))
}

/// A blocked key's decision when the reply of the function `name` says so
/// (-1, the microseconds left of the block, the latest reset).
fn blocked(limits: &[LimitRate], reply: &[i64], name: &str) -> Result<Option<Decision>, BackendError> {
    match reply {
        [-1, left, reset, ..] => match (u64::try_from(*left), u64::try_from(*reset)) {
            (Ok(left), Ok(reset)) if left > 0 => Ok(Some(Decision::blocked(
                left,
                reset,
                limits[0].rate.limit,
                Tick::Micros,
            ))),
            _ => Err(unexpected(name, reply)),
        },
        _ => Ok(None),
    }
}

/// Each limit's outcome from its four numbers in a reply of the function
/// `name`: allowed (1 or 0), remaining, reset, retry_after (-1 for none).
fn outcomes(limits: &[LimitRate], reply: &[i64], name: &str) -> Result<Vec<Outcome>, BackendError> {
    if reply.len() != 4 * limits.len() {
        return Err(unexpected(name, reply));
    }
    reply
        .chunks_exact(4)
        .map(|fields| {
            let number = |x: i64| u64::try_from(x).map_err(|_| unexpected(name, reply));
            Ok(Outcome {
                allowed: match fields[0] {
                    0 => false,
                    1 => true,
                    _ => return Err(unexpected(name, reply)),
                },
                remaining: number(fields[1])?,
                reset: number(fields[2])?,
                retry_after: match fields[3] {
                    -1 => None,
                    d => Some(number(d)?),
                },
            })
        })
        .collect()
}

/// The array of numbers the function `name` returned in `rows`.
fn reply_of(rows: &[tokio_postgres::Row], name: &str) -> Result<Vec<i64>, BackendError> {
    rows.first()
        .and_then(|row| row.try_get(0).ok())
        .ok_or_else(|| unexpected(name, &[]))
}

/// A reply that is not what the function `name` returns.
fn unexpected(name: &str, reply: &[i64]) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("unexpected reply from the {name} function: {reply:?}"),
    )
}
