//! What happens to an admitted request's response once the inner service
//! has answered: its charge settled, the response cost header removed.

use http::{HeaderMap, HeaderValue, StatusCode};

use crate::engine::Engine;
use crate::rate_limit::RateLimit;
use crate::response_cost::Charge;
use tollgate::backend::Backend;

/// The work left for a response, boxed in the response future only when a
/// configuration asks for it.
pub(crate) trait AfterResponse: Send {
    /// Settles the charge (at once: the limiter is in memory) and edits the
    /// response's headers.
    fn run(self: Box<Self>, status: StatusCode, headers: &mut HeaderMap);
}

/// A request's charge and the configuration that settles it.
pub(crate) struct Settle<B: Backend> {
    config: RateLimit<B>,
    charge: Option<Box<Charge>>,
}

impl<B: Backend> Settle<B> {
    /// The work left for the response to a request admitted with `charge`,
    /// if any.
    #[inline]
    pub(crate) fn boxed(
        config: &RateLimit<B>,
        charge: Option<Box<Charge>>,
    ) -> Option<Box<dyn AfterResponse>> {
        if !config.engine().reads_response(charge.as_deref()) {
            return None;
        }
        Some(Box::new(Self {
            config: config.clone(),
            charge,
        }))
    }
}

impl<B: Backend> AfterResponse for Settle<B> {
    fn run(self: Box<Self>, status: StatusCode, headers: &mut HeaderMap) {
        let engine = self.config.engine();
        if let Some((charge, op)) = edit(engine, self.charge.as_deref(), status, headers) {
            engine.settle_or_count(charge, op);
        }
    }
}

/// Removes the cost header when configured, and returns the operation
/// that settles `charge`, if any: the part of settling shared by the
/// in-memory and the awaited paths.
pub(crate) fn edit<'c, B: Backend>(
    engine: &Engine<B>,
    charge: Option<&'c Charge>,
    status: StatusCode,
    headers: &mut HeaderMap,
) -> Option<(&'c Charge, tollgate::Operation)> {
    let (op, remove) = engine.settlement(charge, status.as_u16(), |name| {
        headers.get_all(name).iter().map(HeaderValue::as_bytes)
    });
    if let Some(name) = remove {
        headers.remove(name);
    }
    Some((charge?, op?))
}
