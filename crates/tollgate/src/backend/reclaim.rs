//! Deferred freeing of memory that lock-free lookups may still be reading.
//!
//! A decision on a known key reads its shard's slot array without taking the
//! shard's lock, so a writer that replaces the array (it grew, shrank or
//! dropped deleted slots) or deletes a key with a heap block cannot free the
//! old memory at once. It [`retire`]s it instead, and the memory is freed
//! once every lookup that might still see it has finished.
//!
//! A lookup runs inside a *read section* ([`pin`]). Each thread announces its
//! sections in a record of its own: a counter that is odd while the thread
//! is inside one. Entering costs one store to that record and a full fence;
//! nothing shared is written, so lookups on different cores never contend.
//! Retiring is the expensive side, and rare: the retiring thread fences,
//! notes every record that is inside a section, and the memory waits until
//! each of those records has moved on (checked on every later retire and on
//! every pass of the janitor). When no thread is inside a section, the memory
//! is freed at once.
//!
//! Why this is enough: a reader stores its odd count, fences, then loads a
//! pointer; a writer stores the replacement pointer, fences, then loads the
//! count. With both fences sequentially consistent, either the writer sees
//! the odd count (and waits for it to change), or the reader's load sees the
//! replacement (and never reaches the retired memory).
//!
//! Records are never freed: a thread that exits hands its record to the next
//! new thread, so there are at most as many records as threads ever ran at
//! once.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::PoisonError;

use super::sync::{fence, thread_local, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// One thread's announcement of its read sections, on a cache line of its
/// own.
#[repr(align(128))]
struct Record {
    /// Odd while the thread is inside a read section; each section adds 2.
    sections: AtomicU64,
    /// Whether a live thread uses this record.
    taken: AtomicBool,
    /// The record's place in [`RECORDS`]: threads alive at the same time
    /// have distinct ones, and a new thread takes the lowest free one, so
    /// the workers of a process hold small, mostly consecutive numbers.
    index: usize,
}

/// Every record ever created.
#[cfg(not(tollgate_loom))]
static RECORDS: Mutex<Vec<&'static Record>> = Mutex::new(Vec::new());

/// Retired memory waiting for readers to move on.
#[cfg(not(tollgate_loom))]
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

// Under loom the statics are made anew for each explored execution (its
// mutexes have no `const fn new`); a record, leaked as always, then lives
// for one execution only.
#[cfg(tollgate_loom)]
loom::lazy_static! {
    /// Every record created in this execution.
    static ref RECORDS: Mutex<Vec<&'static Record>> = Mutex::new(Vec::new());
    /// Retired memory waiting for readers to move on.
    static ref PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
}

struct Pending {
    /// Held only to be dropped.
    _garbage: Box<dyn Send>,
    /// The records that were inside a section when the memory was retired,
    /// with the count each had then.
    readers: Vec<(&'static Record, u64)>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here panics while holding the lock in a way that leaves the
    // lists inconsistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This thread's record, handed back when the thread exits.
struct Local(Cell<Option<&'static Record>>);

impl Drop for Local {
    fn drop(&mut self) {
        // Unwinding from a failed loom model, outside loom's execution.
        #[cfg(tollgate_loom)]
        if std::thread::panicking() {
            return;
        }
        if let Some(record) = self.0.get() {
            record.taken.store(false, Ordering::Release);
        }
    }
}

#[cfg(not(tollgate_loom))]
thread_local! {
    static LOCAL: Local = const { Local(Cell::new(None)) };
}

#[cfg(all(test, not(tollgate_loom)))]
thread_local! {
    /// A thread index that tests set to choose a thread's lane.
    static INDEX_OVERRIDE: Cell<Option<usize>> = const { Cell::new(None) };
}

// Loom's `thread_local!` takes no `const` initialiser; its locals belong to
// loom's threads, which all run on one thread of the process.
#[cfg(tollgate_loom)]
thread_local! {
    static LOCAL: Local = Local(Cell::new(None));
}

#[cfg(all(test, tollgate_loom))]
thread_local! {
    /// A thread index that tests set to choose a thread's lane.
    static INDEX_OVERRIDE: Cell<Option<usize>> = Cell::new(None);
}

/// Makes [`thread_index`] return `index` on this thread (tests only).
#[cfg(test)]
pub(crate) fn set_thread_index(index: usize) {
    INDEX_OVERRIDE.with(|i| i.set(Some(index)));
}

/// This thread's record, taking one on first use.
#[inline]
fn local_record(local: &Local) -> &'static Record {
    match local.0.get() {
        Some(record) => record,
        None => {
            let record = take_record();
            local.0.set(Some(record));
            record
        }
    }
}

/// The thread index that `record` gives its thread (in tests, the one set
/// with [`set_thread_index`], if any).
#[inline]
fn index_of(record: &Record) -> usize {
    #[cfg(test)]
    if let Some(index) = INDEX_OVERRIDE.with(Cell::get) {
        return index;
    }
    record.index
}

/// A small number for the calling thread, distinct from those of the
/// other threads alive: the index of its record. Tables use it to give the
/// threads of a process slot arrays of their own. 0 while the thread's
/// local storage is being torn down.
pub(crate) fn thread_index() -> usize {
    LOCAL.try_with(|local| index_of(local_record(local))).unwrap_or(0)
}

/// A free record, or a new one.
#[cold]
fn take_record() -> &'static Record {
    let mut records = lock(&RECORDS);
    for record in records.iter() {
        if record
            .taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return record;
        }
    }
    let record: &'static Record = Box::leak(Box::new(Record {
        sections: AtomicU64::new(0),
        taken: AtomicBool::new(true),
        index: records.len(),
    }));
    records.push(record);
    record
}

/// A read section: memory retired after it began is not freed before it is
/// dropped. It stays on its thread.
pub(crate) struct Section {
    record: &'static Record,
    end: u64,
    _not_send: PhantomData<*const ()>,
}

impl Section {
    /// The number of this thread's record (see [`thread_index`]).
    #[inline]
    pub(crate) fn thread_index(&self) -> usize {
        index_of(self.record)
    }
}

impl Drop for Section {
    #[inline]
    fn drop(&mut self) {
        // Release: every read of the section happens before a retiring
        // thread's acquire load that sees this count (or a later one).
        self.record.sections.store(self.end, Ordering::Release);
    }
}

/// Enters a read section.
///
/// `None` when the thread cannot announce one: while its thread-local
/// storage is being torn down, or inside another section (decisions do not
/// nest them). The caller then takes the shard's lock instead.
#[inline]
pub(crate) fn pin() -> Option<Section> {
    LOCAL
        .try_with(|local| {
            let record = local_record(local);
            let count = record.sections.load(Ordering::Relaxed);
            if count & 1 == 1 {
                return None;
            }
            // Release: a retiring thread that reads this count (or a later
            // one) also sees the end of this thread's previous section.
            record.sections.store(count + 1, Ordering::Release);
            // Pairs with the fence in `retire`: see the module documentation.
            fence(Ordering::SeqCst);
            Some(Section {
                record,
                end: count + 2,
                _not_send: PhantomData,
            })
        })
        .ok()
        .flatten()
}

/// Frees `garbage` once no read section that began before this call is
/// still running: at once when none is, otherwise later. The caller must
/// already have made the memory unreachable for new sections.
pub(crate) fn retire(garbage: Box<dyn Send>) {
    // Pairs with the fence in `pin`: see the module documentation.
    fence(Ordering::SeqCst);
    let readers: Vec<(&'static Record, u64)> = lock(&RECORDS)
        .iter()
        .filter_map(|record| {
            let count = record.sections.load(Ordering::Acquire);
            (count & 1 == 1).then_some((*record, count))
        })
        .collect();
    if readers.is_empty() {
        drop(garbage);
    } else {
        lock(&PENDING).push(Pending {
            _garbage: garbage,
            readers,
        });
    }
    collect();
}

/// A boxed value that read sections may still reference, turned back into
/// its box only when freed: a `Box` asserts unique access, which it does
/// not have while they run.
struct RetiredBox<T>(*mut T);

// SAFETY: it owns the value (from `Box::into_raw`), which is `Send`.
unsafe impl<T: Send> Send for RetiredBox<T> {}

impl<T> Drop for RetiredBox<T> {
    #[cfg(not(tollgate_loom))]
    fn drop(&mut self) {
        // SAFETY: per `retire_box`'s contract the pointer came from
        // `Box::into_raw` and is freed only here, once no section reads it.
        drop(unsafe { Box::from_raw(self.0) });
    }

    /// Under loom the value is dropped, which loom's objects in it record
    /// as a write, but its memory is kept: a section that still reads it is
    /// then reported by loom rather than reading freed memory.
    #[cfg(tollgate_loom)]
    fn drop(&mut self) {
        // SAFETY: as above; the value is dropped once and its memory never
        // used again.
        unsafe { std::ptr::drop_in_place(self.0) };
    }
}

/// [`retire`]s the box behind `ptr`.
///
/// # Safety
///
/// `ptr` must come from `Box::into_raw`, be unreachable for sections that
/// begin from now on, and be freed by nothing else.
pub(crate) unsafe fn retire_box<T: Send + 'static>(ptr: *mut T) {
    retire(Box::new(RetiredBox(ptr)));
}

/// The number of retired blocks not yet freed (loom models only: each
/// execution must free what it retired).
#[cfg(all(test, tollgate_loom))]
pub(crate) fn pending() -> usize {
    lock(&PENDING).len()
}

/// Frees the retired memory whose readers have all moved on.
pub(crate) fn collect() {
    let ready: Vec<Pending> = {
        let mut pending = lock(&PENDING);
        if pending.is_empty() {
            return;
        }
        for p in pending.iter_mut() {
            // Acquire: the reader's section ended before the count changed.
            p.readers
                .retain(|(record, count)| record.sections.load(Ordering::Acquire) == *count);
        }
        pending.extract_if(.., |p| p.readers.is_empty()).collect()
    };
    // Freed outside the lock.
    drop(ready);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;

    /// Counts its drops.
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn memory_retired_inside_a_section_waits_for_it() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let (entered, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (entered_tx, entered_rx) = entered;
        let (release_tx, release_rx) = release;
        let reader = std::thread::spawn(move || {
            let section = pin().expect("a fresh thread can pin");
            assert!(pin().is_none(), "sections do not nest");
            entered_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            drop(section);
        });
        entered_rx.recv().unwrap();
        retire(Box::new(Tracked(dropped.clone())));
        collect();
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "freed under a running section");
        release_tx.send(()).unwrap();
        reader.join().unwrap();
        // Other tests may hold sections of their own for a moment.
        while dropped.load(Ordering::SeqCst) == 0 {
            collect();
            std::thread::yield_now();
        }
    }

    #[test]
    fn memory_retired_outside_sections_is_freed_once_they_end() {
        let dropped = Arc::new(AtomicUsize::new(0));
        {
            let _section = pin();
        }
        retire(Box::new(Tracked(dropped.clone())));
        while dropped.load(Ordering::SeqCst) == 0 {
            collect();
            std::thread::yield_now();
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn exited_threads_hand_their_records_back() {
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            drop(pin());
            let record = LOCAL.with(|local| local.0.get()).expect("pinned once");
            pinned_tx.send(record as *const Record as usize).unwrap();
            exit_rx.recv().unwrap();
        });
        let address = pinned_rx.recv().unwrap();
        // Holding the list, no other thread can take the record once it is
        // handed back.
        let records = lock(&RECORDS);
        let record = *records
            .iter()
            .find(|r| **r as *const Record as usize == address)
            .expect("records are kept");
        assert!(record.taken.load(Ordering::Acquire));
        exit_tx.send(()).unwrap();
        thread.join().unwrap();
        assert!(
            !record.taken.load(Ordering::Acquire),
            "an exited thread keeps its record"
        );
    }
}
