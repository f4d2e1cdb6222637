//! A value made on first use and shared from then on, in one word: what a
//! binding keeps for what most bindings never see (blocks, holds), so that
//! tens of thousands of bindings stay small.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

/// The value in `slot`, made with `make` when it holds none; `true` with it
/// when this call made it (of two calls at once, one value is kept and the
/// other dropped unused).
pub(crate) fn get_or_make<T>(slot: &ArcSwapOption<T>, make: impl FnOnce() -> T) -> (Arc<T>, bool) {
    if let Some(value) = slot.load_full() {
        return (value, false);
    }
    let made = Arc::new(make());
    let before = slot.compare_and_swap(&None::<Arc<T>>, Some(Arc::clone(&made)));
    match &*before {
        Some(kept) => (Arc::clone(kept), false),
        None => (made, true),
    }
}
