//! Long-form documentation: the guide, read in order from [`guide`], and
//! the reference pages: the decision contract, the choices it leaves open,
//! the in-memory design and how the crates are built.
//!
//! Each page is a Markdown file of the repository, shown here as it reads
//! there. Measured figures (benchmarks, memory per key) are in
//! [`performance`] and printed by the benchmarks themselves.

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
         [leases]: https://github.com/tollgate-rs/tollgate/blob/main/docs/leases.md\n\
         [guide]: crate::_documentation::guide\n\
         [library]: crate::_documentation::library\n\
         [simulate]: crate::_documentation::simulate\n\
         [policy-files]: crate::_documentation::policy_files\n\
         [middleware]: crate::_documentation::middleware\n\
         [service]: crate::_documentation::service\n\
         [operations]: crate::_documentation::operations\n\
         [operations-service]: crate::_documentation::operations#running-the-decision-service\n\
         [performance]: crate::_documentation::performance\n\
         [performance-replay]: crate::_documentation::performance#replaying-traces\n\
         [performance-redis]: crate::_documentation::performance#redis\n\
         [performance-middleware]: crate::_documentation::performance#http-middleware\n\
         [performance-service]: crate::_documentation::performance#decision-service\n\
         [concurrency-lanes]: crate::_documentation::concurrency#lanes\n\
         [readme-replay]: https://github.com/tollgate-rs/tollgate#trying-policies-on-your-own-traffic\n\n"
    };
}

pub mod guide {
    #![doc = links!()]
    #![doc = include_str!("../docs/guide.md")]
}

pub mod library {
    #![doc = links!()]
    #![doc = include_str!("../docs/library.md")]
}

pub mod simulate {
    #![doc = links!()]
    #![doc = include_str!("../docs/simulate.md")]
}

pub mod policy_files {
    #![doc = links!()]
    #![doc = include_str!("../docs/policy-files.md")]
}

pub mod middleware {
    #![doc = links!()]
    #![doc = include_str!("../docs/middleware.md")]
}

pub mod service {
    #![doc = links!()]
    #![doc = include_str!("../docs/service.md")]
}

pub mod operations {
    #![doc = links!()]
    #![doc = include_str!("../docs/operations.md")]
}

pub mod performance {
    #![doc = links!()]
    #![doc = include_str!("../docs/performance.md")]
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
