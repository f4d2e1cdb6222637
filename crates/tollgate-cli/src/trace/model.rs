//! The trace model, the same for every input format: requests, their keys
//! and resources, and the builder the format readers fill.
//!
//! A [`Trace`] is built one request at a time by the readers of its formats
//! ([`super::csv`], [`super::access_log`]) with a [`TraceBuilder`], which
//! keeps the requests compactly: keys and resources stored once each, and
//! every `time` field as written in one shared buffer.

use hashbrown::HashTable;

use super::problem::ParseError;

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The 1-based file line the request starts on.
    pub line: u64,
    /// The time in nanoseconds since the Unix epoch.
    pub nanos: u64,
    /// The units the request costs (1 when the trace has no `cost` column or
    /// the field is empty).
    pub cost: u64,
    /// The index of the request's key in [`Trace::keys`].
    pub key: usize,
    /// The index of the request's resource in [`Trace::resources`], if it
    /// names one (`None`: the default policy applies).
    pub resource: Option<usize>,
    /// Where the `time` field as written is in the trace's time text
    /// ([`Trace::time`]): start and end byte offsets.
    time: (usize, usize),
}

/// Distinct names (keys or resources), numbered in order of first
/// appearance, each stored once.
#[derive(Clone, Default)]
pub struct Names {
    /// Every name, one after the other.
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
    /// The index of every name, by hash.
    index: HashTable<usize>,
    /// The hasher of `index`, randomly seeded.
    hasher: ahash::RandomState,
}

impl Names {
    /// How many names there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The name with index `i`.
    ///
    /// # Panics
    ///
    /// When `i` is not below [`Names::len`].
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    /// The names in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The index of `name`, if present.
    pub fn position(&self, name: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        self.index.find(hash, |&i| self.get(i) == name).copied()
    }

    /// The index of `name`, added at the end when new.
    pub fn intern(&mut self, name: &str) -> usize {
        let hash = self.hasher.hash_one(name);
        let Self {
            text,
            ends,
            index,
            hasher,
        } = self;
        let get = |i: usize| &text[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        if let Some(&i) = index.find(hash, |&i| get(i) == name) {
            return i;
        }
        let i = ends.len();
        text.push_str(name);
        ends.push(text.len());
        let name_at = |&i: &usize| {
            let start = if i == 0 { 0 } else { ends[i - 1] };
            hasher.hash_one(&text[start..ends[i]])
        };
        index.insert_unique(hash, i, name_at);
        i
    }
}

impl std::ops::Index<usize> for Names {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        self.get(i)
    }
}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Names {}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A whole trace, validated and held in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The distinct keys, in order of first appearance.
    pub keys: Names,
    /// The distinct resources, in order of first appearance.
    pub resources: Names,
    /// The requests, in input order.
    pub requests: Vec<Request>,
    /// The invalid lines skipped (only with `skip_invalid`).
    pub skipped: Skipped,
    /// Every request's `time` field as written, one after the other.
    times: String,
}

/// The invalid lines a read skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// How many lines were skipped.
    pub count: u64,
    /// The first [`Skipped::KEPT`] of them, with their problems.
    pub first: Vec<ParseError>,
}

impl Skipped {
    /// How many skipped lines are named in reports.
    pub const KEPT: usize = 5;
}

impl Trace {
    /// The `time` field of `request` exactly as written in the trace.
    pub fn time(&self, request: &Request) -> &str {
        &self.times[request.time.0..request.time.1]
    }
}

/// Builds a [`Trace`] one request at a time, numbering keys and resources
/// in order of first appearance.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    /// The trace so far.
    trace: Trace,
    /// Whether invalid lines are skipped rather than errors.
    skip_invalid: bool,
}

impl TraceBuilder {
    /// An empty trace; `skip_invalid` makes [`TraceBuilder::invalid`] count
    /// lines instead of failing.
    pub fn new(skip_invalid: bool) -> Self {
        Self {
            trace: Trace::default(),
            skip_invalid,
        }
    }

    /// Appends one valid request.
    pub fn push(&mut self, line: u64, time: &str, nanos: u64, key: &str, resource: Option<&str>, cost: u64) {
        let key = self.trace.keys.intern(key);
        let resource = resource.map(|r| self.trace.resources.intern(r));
        let start = self.trace.times.len();
        self.trace.times.push_str(time);
        self.trace.requests.push(Request {
            line,
            nanos,
            cost,
            key,
            resource,
            time: (start, self.trace.times.len()),
        });
    }

    /// An invalid data line: counted when skipping invalid lines.
    ///
    /// # Errors
    ///
    /// `error` itself unless skipping.
    pub fn invalid(&mut self, error: ParseError) -> Result<(), ParseError> {
        if !self.skip_invalid {
            return Err(error);
        }
        let skipped = &mut self.trace.skipped;
        skipped.count += 1;
        if skipped.first.len() < Skipped::KEPT {
            skipped.first.push(error);
        }
        Ok(())
    }

    /// The trace built.
    pub fn finish(mut self) -> Trace {
        self.trace.requests.shrink_to_fit();
        self.trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_numbered_in_order_and_stored_once() {
        let mut names = Names::default();
        assert_eq!(["b", "a", "b", "", "a"].map(|n| names.intern(n)), [0, 1, 0, 2, 1]);
        assert_eq!(names.iter().collect::<Vec<_>>(), ["b", "a", ""]);
        assert_eq!((names.position("a"), names.position("c")), (Some(1), None));
        assert_eq!((names.len(), &names[0]), (3, "b"));
    }
}
