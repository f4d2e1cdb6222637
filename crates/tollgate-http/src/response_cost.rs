//! A cost known only once the response is there: no charge for responses a
//! predicate picks, or the actual cost from a response header. The request
//! is charged up front; its response settles the difference with a refund
//! or a penalty on the same key and resource.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::StatusCode;
use tollgate::{Decision, Operation};

use crate::cost::parse_cost;

pub(crate) type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

/// What the configuration says about responses; empty by default.
#[derive(Clone, Default)]
pub(crate) struct ResponseCost {
    /// Responses whose request is not charged.
    no_charge: Option<Arc<StatusFn>>,
    /// The header holding a request's actual cost (lower case).
    header: Option<Box<str>>,
    /// Whether that header is removed before the response goes out.
    remove_header: bool,
    /// Shared by the clones of the configuration.
    counts: Arc<Counts>,
}

impl std::fmt::Debug for ResponseCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCost")
            .field("no_charge_when", &self.no_charge.as_ref().map(|_| ".."))
            .field("header", &self.header)
            .field("remove_header", &self.remove_header)
            .finish()
    }
}

#[derive(Default)]
struct Counts {
    refunds: AtomicU64,
    penalties: AtomicU64,
    failed: AtomicU64,
    unread: AtomicU64,
}

/// How the charges of admitted requests were settled after their
/// responses, from [`RateLimit::adjustments`](crate::RateLimit::adjustments):
/// counts since the configuration was made, shared by its clones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Adjustments {
    /// Refunds applied: a response picked by
    /// [`RateLimit::no_charge_when`](crate::RateLimit::no_charge_when), or
    /// an actual cost below the charge.
    pub refunds: u64,
    /// Penalties applied: an actual cost above the charge.
    pub penalties: u64,
    /// Refunds and penalties the limiter failed to apply (a store error):
    /// the charge stayed as it was, and the response went out unchanged.
    pub failed: u64,
    /// Responses whose cost header was missing, appeared more than once or
    /// was not one decimal integer from 0 to 2⁶²: the charge stayed as it
    /// was.
    pub unread: u64,
}

/// What an admitted request was charged, kept until its response.
pub(crate) struct Charge {
    pub(crate) resource: Box<str>,
    pub(crate) key: Box<[u8]>,
    charged: u64,
}

impl ResponseCost {
    /// Whether anything happens after a response.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.no_charge.is_some() || self.header.is_some()
    }

    pub(crate) fn set_no_charge(&mut self, f: Arc<StatusFn>) {
        self.no_charge = Some(f);
    }

    pub(crate) fn set_header(&mut self, name: &str) {
        self.header = Some(name.to_ascii_lowercase().into_boxed_str());
    }

    pub(crate) fn set_remove_header(&mut self, remove: bool) {
        self.remove_header = remove;
    }

    /// The cost header to remove from responses, when it is to be removed.
    pub(crate) fn header_to_remove(&self) -> Option<&str> {
        self.header.as_deref().filter(|_| self.remove_header)
    }

    /// The charge to settle after the response to a request decided as
    /// `decision`, or `None` when there is nothing to settle: nothing is
    /// configured, or the store charged the request nothing (denied, exempt,
    /// denied only in shadow mode, admitted by fail-open, or decided by the
    /// in-memory fallback, which operations do not reach).
    #[inline(always)]
    pub(crate) fn charge(
        &self,
        decision: &Decision,
        resource: &str,
        key: &[u8],
        cost: u64,
    ) -> Option<Box<Charge>> {
        // Nothing to settle, the common case, is answered without a call.
        if !self.is_set() {
            return None;
        }
        Self::charge_of(decision, resource, key, cost)
    }

    /// [`ResponseCost::charge`] when something happens after a response.
    fn charge_of(decision: &Decision, resource: &str, key: &[u8], cost: u64) -> Option<Box<Charge>> {
        let charged = decision.allowed
            && !decision.fail_open
            && !decision.fallback
            && !decision.shadow_denied
            && decision.listed.is_none();
        charged.then(|| {
            Box::new(Charge {
                resource: resource.into(),
                key: key.into(),
                charged: cost,
            })
        })
    }

    /// The operation that settles `charge` for a response with `status`,
    /// whose cost header values `values` gives, if any. Counts an unread
    /// header.
    pub(crate) fn settlement<'v, I>(
        &self,
        charge: &Charge,
        status: u16,
        values: impl FnOnce(&str) -> I,
    ) -> Option<Operation>
    where
        I: Iterator<Item = &'v [u8]>,
    {
        let picked = self.no_charge.as_ref().is_some_and(|f| {
            // A status outside 100..=999 cannot come from `http` or actix-web.
            StatusCode::from_u16(status).is_ok_and(|status| f(status))
        });
        if picked {
            return (charge.charged > 0).then_some(Operation::Refund(charge.charged));
        }
        let name = self.header.as_deref()?;
        let Some(actual) = read_cost(values(name)) else {
            self.counts.unread.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        adjust(charge.charged, actual)
    }

    /// Counts the outcome of a refund or penalty.
    pub(crate) fn count(&self, op: Operation, applied: bool) {
        let counter = match (op, applied) {
            (_, false) => &self.counts.failed,
            (Operation::Penalty(_), true) => &self.counts.penalties,
            (_, true) => &self.counts.refunds,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn adjustments(&self) -> Adjustments {
        let c = &self.counts;
        Adjustments {
            refunds: c.refunds.load(Ordering::Relaxed),
            penalties: c.penalties.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            unread: c.unread.load(Ordering::Relaxed),
        }
    }
}

/// The cost in the one value of a response's cost header: decimal digits,
/// at most [`tollgate::Policy::MAX_LIMIT`], the largest cost an operation takes.
fn read_cost<'v>(mut values: impl Iterator<Item = &'v [u8]>) -> Option<u64> {
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_cost(value)
        .ok()
        .filter(|&cost| cost <= tollgate::Policy::MAX_LIMIT)
}

/// The operation that turns a charge of `charged` into one of `actual`.
fn adjust(charged: u64, actual: u64) -> Option<Operation> {
    match actual.cmp(&charged) {
        std::cmp::Ordering::Greater => Some(Operation::Penalty(actual - charged)),
        std::cmp::Ordering::Less => Some(Operation::Refund(charged - actual)),
        std::cmp::Ordering::Equal => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::Listed;

    use super::*;

    fn allowed() -> Decision {
        Decision::new(true, 10, 9, Duration::from_secs(1), None)
    }

    fn configured() -> ResponseCost {
        let mut rc = ResponseCost::default();
        rc.set_no_charge(Arc::new(|s: StatusCode| s.is_server_error()));
        rc.set_header("X-Tokens-Used");
        rc
    }

    fn settle(rc: &ResponseCost, charged: u64, status: u16, values: &[&'static [u8]]) -> Option<Operation> {
        let charge = rc.charge(&allowed(), "r", b"k", charged).unwrap();
        rc.settlement(&charge, status, |name| {
            assert_eq!(name, "x-tokens-used");
            values.iter().copied()
        })
    }

    #[test]
    fn only_what_the_store_charged_is_settled() {
        let rc = configured();
        assert!(rc.charge(&allowed(), "r", b"k", 1).is_some());
        let mut denied = allowed();
        denied.allowed = false;
        let mut exempt = allowed();
        exempt.listed = Some(Listed::Exempt);
        let mut shadow = allowed();
        shadow.shadow_denied = true;
        let mut fallback = allowed();
        fallback.fallback = true;
        let fail_open = Decision::failed_open(10);
        for d in [denied, exempt, shadow, fallback, fail_open] {
            assert!(rc.charge(&d, "r", b"k", 1).is_none(), "{d:?}");
        }
        assert!(ResponseCost::default().charge(&allowed(), "r", b"k", 1).is_none());
    }

    #[test]
    fn a_picked_response_refunds_the_whole_charge_whatever_its_header_says() {
        let rc = configured();
        assert_eq!(settle(&rc, 3, 503, &[b"9"]), Some(Operation::Refund(3)));
        assert_eq!(settle(&rc, 0, 500, &[]), None);
        assert_eq!(rc.adjustments().unread, 0);
    }

    #[test]
    fn the_header_adjusts_the_charge_up_or_down() {
        let rc = configured();
        assert_eq!(settle(&rc, 3, 200, &[b"10"]), Some(Operation::Penalty(7)));
        assert_eq!(settle(&rc, 3, 200, &[b"1"]), Some(Operation::Refund(2)));
        assert_eq!(settle(&rc, 3, 404, &[b"003"]), None);
        assert_eq!(
            settle(&rc, 0, 200, &[b"4611686018427387904"]),
            Some(Operation::Penalty(tollgate::Policy::MAX_LIMIT))
        );
        assert_eq!(rc.adjustments().unread, 0);
    }

    #[test]
    fn an_unreadable_header_leaves_the_charge_and_is_counted() {
        let rc = configured();
        let cases: [&[&'static [u8]]; 6] = [
            &[],
            &[b""],
            &[b"-1"],
            &[b"1.5"],
            &[b"1", b"2"],
            &[b"4611686018427387905"],
        ];
        for values in cases {
            assert_eq!(settle(&rc, 3, 200, values), None, "{values:?}");
        }
        assert_eq!(rc.adjustments().unread, 6);
    }
}
