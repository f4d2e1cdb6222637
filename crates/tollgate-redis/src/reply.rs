//! The scripts' replies read as decisions: a reply that is not what the
//! scripts send is a [`BackendErrorKind::Protocol`] error.

use tollgate::backend::BackendError;
use tollgate::backend::BackendErrorKind;
use tollgate::backend::Tick;
use tollgate::strategy::{self, LimitRate, Outcome};
use tollgate::Decision;

/// The decision of a blocked key when `reply` is `{-1, left_us, reset_us}`
/// (`limit`: the policy's first limit's); `None` for any other reply.
pub(crate) fn parse_blocked(reply: &[i64], limit: u64) -> Result<Option<Decision>, BackendError> {
    match *reply {
        [-1, left, reset] => match (u64::try_from(left), u64::try_from(reset)) {
            (Ok(left), Ok(reset)) if left > 0 => {
                Ok(Some(Decision::blocked(left, reset, limit, Tick::Micros)))
            }
            _ => Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the rate-limit script: {reply:?}"),
            )),
        },
        _ => Ok(None),
    }
}

/// The decisions of the parts of one request, given each part's limits,
/// from the `together` entry point's reply: for each part the microseconds
/// left of a block (0 for none), then four numbers per limit.
pub(crate) fn parse_together<'a>(
    reply: &[i64],
    parts: impl ExactSizeIterator<Item = &'a [LimitRate]>,
) -> Result<Vec<Decision>, BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("unexpected reply from the rate-limit script: {reply:?}"),
        )
    };
    let mut decisions = Vec::with_capacity(parts.len());
    let mut rest = reply;
    for limits in parts {
        let len = 1 + 4 * limits.len();
        if rest.len() < len {
            return Err(bad());
        }
        let (fields, tail) = rest.split_at(len);
        rest = tail;
        let mut outcomes = [NO_OUTCOME; tollgate::Policy::MAX_LIMITS];
        let outcomes = parse_reply(&fields[1..], &mut outcomes[..limits.len()])?;
        let blocked_for = u64::try_from(fields[0]).map_err(|_| bad())?;
        decisions.push(if blocked_for > 0 {
            let reset = outcomes.iter().map(|o| o.reset).max().unwrap_or(0);
            Decision::blocked(blocked_for, reset, limits[0].rate.limit, Tick::Micros)
        } else {
            Decision::from_compound(strategy::combine(outcomes), limits, Tick::Micros)
        });
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(decisions)
}

/// A placeholder for the outcomes a reply fills in.
pub(crate) const NO_OUTCOME: Outcome = Outcome {
    allowed: false,
    remaining: 0,
    reset: 0,
    retry_after: None,
};

/// Reads `{allowed, remaining, reset_us, retry_after_us or -1}` for each
/// limit into `outcomes`, which must hold one per limit.
pub(crate) fn parse_reply<'a>(
    reply: &[i64],
    outcomes: &'a mut [Outcome],
) -> Result<&'a [Outcome], BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("unexpected reply from the rate-limit script: {reply:?}"),
        )
    };
    if reply.len() != 4 * outcomes.len() {
        return Err(bad());
    }
    for (outcome, fields) in outcomes.iter_mut().zip(reply.chunks_exact(4)) {
        let &[allowed, remaining, reset, retry_after] = fields else {
            return Err(bad());
        };
        *outcome = Outcome {
            allowed: match allowed {
                0 => false,
                1 => true,
                _ => return Err(bad()),
            },
            remaining: u64::try_from(remaining).map_err(|_| bad())?,
            reset: u64::try_from(reset).map_err(|_| bad())?,
            retry_after: match retry_after {
                -1 => None,
                d => Some(u64::try_from(d).map_err(|_| bad())?),
            },
        };
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn replies_parse_or_fail_as_protocol_errors() {
        let mut one = [NO_OUTCOME; 1];
        let o = parse_reply(&[1, 4, 1_000, -1], &mut one).unwrap()[0];
        assert!(o.allowed);
        assert_eq!((o.remaining, o.reset, o.retry_after), (4, 1_000, None));
        let o = parse_reply(&[0, 0, 7, 3], &mut one).unwrap()[0];
        assert_eq!(o.retry_after, Some(3));
        let mut two = [NO_OUTCOME; 2];
        let both = parse_reply(&[1, 4, 1_000, -1, 0, 0, 7, 3], &mut two).unwrap();
        assert_eq!((both[0].remaining, both[1].retry_after), (4, Some(3)));
        for bad in [
            &[1, 2, 3][..],
            &[2, 0, 0, -1],
            &[1, -1, 0, -1],
            &[0, 0, 0, -2],
            &[1, 4, 1_000, -1, 0],
        ] {
            assert_eq!(
                parse_reply(bad, &mut one).unwrap_err().kind(),
                BackendErrorKind::Protocol
            );
        }
        let short = parse_reply(&[1, 4, 1_000, -1], &mut two).unwrap_err();
        assert_eq!(short.kind(), BackendErrorKind::Protocol);
    }

    #[test]
    fn blocked_replies_become_blocked_decisions_and_others_pass_through() {
        let d = parse_blocked(&[-1, 5_000, 9_000], 7).unwrap().unwrap();
        assert_eq!(d, Decision::blocked(5_000, 9_000, 7, Tick::Micros));
        assert_eq!(d.retry_after, Some(Duration::from_millis(5)));
        assert!(parse_blocked(&[0, 0, 7, 3], 7).unwrap().is_none());
        for bad in [&[-1, 0, 9][..], &[-1, -5, 9], &[-1, 5, -9]] {
            let err = parse_blocked(bad, 7).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Protocol);
        }
    }
}
