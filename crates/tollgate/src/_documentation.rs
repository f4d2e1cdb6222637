//! Long-form documentation: the decision contract, the choices it leaves
//! open, how to choose a strategy, and how the crate is built.
//!
//! Each page is a Markdown file of the repository, shown here as it reads
//! there. Measured figures (benchmarks, memory per key) are in the README
//! and printed by the benchmarks themselves.

/// Link targets for the pages below, in rustdoc. Each Markdown file defines
/// the same labels at its end with paths that work in the repository;
/// Markdown uses the first definition of a label, so these win here.
macro_rules! links {
    () => {
        "[semantics]: crate::_documentation::semantics\n\
         [semantics-notes]: crate::_documentation::semantics_notes\n\
         [expired-is-absent]: crate::_documentation::semantics_notes#expired-state-is-absent-state\n\
         [key-layout]: crate::_documentation::semantics_notes#key-layout\n\
         [choosing]: crate::_documentation::choosing_a_strategy\n\
         [emission-interval]: crate::_documentation::choosing_a_strategy#the-emission-interval-t\n\
         [architecture]: crate::_documentation::architecture\n\
         [concurrency]: crate::_documentation::concurrency\n\
         [protecting]: crate::_documentation::protecting_the_store\n\
         [redis]: https://github.com/tollgate-rs/tollgate/blob/main/docs/redis.md\n\
         [redis-time]: https://github.com/tollgate-rs/tollgate/blob/main/docs/redis.md#time-the-servers-clock-or-the-callers\n\
         [readme-performance]: https://github.com/tollgate-rs/tollgate#performance\n\n"
    };
}

pub mod semantics {
    #![doc = links!()]
    #![doc = include_str!("../SEMANTICS.md")]
}

pub mod semantics_notes {
    #![doc = links!()]
    #![doc = include_str!("../docs/semantics-notes.md")]
}

pub mod choosing_a_strategy {
    #![doc = links!()]
    #![doc = include_str!("../docs/choosing-a-strategy.md")]
}

pub mod architecture {
    #![doc = links!()]
    #![doc = include_str!("../docs/architecture.md")]
}

pub mod concurrency {
    #![doc = links!()]
    #![doc = include_str!("../docs/concurrency.md")]
}

pub mod protecting_the_store {
    #![doc = links!()]
    #![doc = include_str!("../docs/protecting-the-store.md")]
}
