//! The store's one question: a binding that answers only decisions, and
//! says so in its capabilities, serves every limiter entry point the way the
//! capabilities promise (a report and an operation refused as unsupported,
//! a reservation what a decision admits now, no leases), and a binding that
//! answers the wrong kind of answer is a protocol error under the fail
//! policy, never a decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::memory::MemoryBinding;
use tollgate::backend::{Answer, Backend, BackendError, BackendErrorKind, Binding, Call, Scope};
use tollgate::protection::Lease;
use tollgate::{Error, FailPolicy, Limiter, MemoryBackend, Operation};

/// A backend whose store answers decisions and nothing else (the default
/// capabilities), counting every call it is asked; `wrong` makes it answer
/// [`Answer::Done`] to a decision.
struct DecisionsOnly {
    memory: MemoryBackend,
    calls: Arc<AtomicU64>,
    wrong: bool,
}

struct DecisionsOnlyBinding {
    memory: MemoryBinding,
    calls: Arc<AtomicU64>,
    wrong: bool,
}

impl Backend for DecisionsOnly {
    type Binding = DecisionsOnlyBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<DecisionsOnlyBinding, Error> {
        Ok(DecisionsOnlyBinding {
            memory: self.memory.bind(scope)?,
            calls: self.calls.clone(),
            wrong: self.wrong,
        })
    }
}

impl Binding for DecisionsOnlyBinding {
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match call {
            Call::Decide { .. } if self.wrong => Ok(Answer::Done),
            Call::Decide { key, cost } => self.memory.call(Call::Decide { key, cost }).await,
            other => panic!("asked {other:?}, which the capabilities leave out"),
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

fn limiter(wrong: bool, fail: FailPolicy) -> (Limiter<DecisionsOnly>, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let backend = DecisionsOnly {
        memory: MemoryBackend::new(),
        calls: calls.clone(),
        wrong,
    };
    let limiter = Limiter::builder()
        .limit(2)
        .window(Duration::from_secs(60))
        .fail_policy(fail)
        .lease(Lease::new(10, Duration::from_secs(1)))
        .backend(backend)
        .build()
        .unwrap();
    (limiter, calls)
}

fn unsupported(err: Error) -> String {
    match err {
        Error::Backend(e) if e.kind() == BackendErrorKind::Unsupported => e.to_string(),
        other => panic!("expected an unsupported call, got {other}"),
    }
}

#[test]
fn a_store_of_decisions_only_is_asked_nothing_else() {
    let (limiter, calls) = limiter(false, FailPolicy::Closed);
    assert!(!limiter.leases(), "a store that does not lease keeps no leases");
    assert!(!limiter.decides_now());
    assert!(block_on(limiter.allow("k")).unwrap().allowed);
    assert_eq!(calls.load(Ordering::Relaxed), 1);

    let report = unsupported(block_on(limiter.charge("k", 1)).unwrap_err());
    assert!(
        report.contains("does not charge usage reported after the fact"),
        "{report}"
    );
    let operation = unsupported(block_on(limiter.operate("k", Operation::Reset)).unwrap_err());
    assert!(
        operation.contains("no per-key operations (reset was asked)"),
        "{operation}"
    );
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "refused without asking the store"
    );

    // A reservation is what a decision admits now: the second unit now,
    // the third refused rather than reserved for later.
    let second = block_on(limiter.reserve_n("k", 1, Duration::from_secs(60))).unwrap();
    assert!(second.is_reserved() && second.delay().is_zero());
    let third = block_on(limiter.reserve_n("k", 1, Duration::from_secs(60))).unwrap();
    assert!(!third.is_reserved());
    assert!(!block_on(limiter.cancel(second)).unwrap(), "nothing to give back");
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

#[test]
fn a_wrong_answer_is_a_protocol_error_under_the_fail_policy() {
    let (closed, _) = limiter(true, FailPolicy::Closed);
    match block_on(closed.allow("k")).unwrap_err() {
        Error::Backend(e) => {
            assert_eq!(e.kind(), BackendErrorKind::Protocol);
            assert!(e.to_string().contains("answered done to the decide call"), "{e}");
        }
        other => panic!("{other}"),
    }
    let (open, _) = limiter(true, FailPolicy::Open);
    let decision = block_on(open.allow("k")).unwrap();
    assert!(decision.allowed && decision.fail_open);
    assert_eq!(open.fail_open_events(), 1);
}
