//! The process's calendars, each kept once and for good, so that a
//! [`super::Calendar`] is a two-byte copyable handle that a limit (and a
//! policy of limits, which is `Copy`) can hold.
//!
//! Calendars are few (a policy file names a handful; a reload that keeps
//! them finds the same ones), but their number is bounded all the same:
//! [`CAPACITY`], beyond which a new one is refused.

use std::collections::HashMap;
use std::num::NonZeroU16;
use std::sync::Mutex;

use once_cell::race::OnceBox;

use super::periods::Identity;
use super::Periods;
use crate::error::ConfigError;

/// The most distinct calendars a process holds.
pub(crate) const CAPACITY: usize = 4_096;

/// The index of a calendar in the registry, from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CalendarId(NonZeroU16);

impl CalendarId {
    /// The index as bits.
    pub(crate) fn raw(self) -> u16 {
        self.0.get()
    }

    /// The handle of `raw`, when a calendar was made there.
    pub(crate) fn from_raw(raw: u16) -> Option<Self> {
        let id = NonZeroU16::new(raw)?;
        slots().get(usize::from(raw) - 1)?.get()?;
        Some(Self(id))
    }
}

/// Every calendar made, by index; read without a lock.
fn slots() -> &'static [OnceBox<Periods>] {
    static SLOTS: OnceBox<Box<[OnceBox<Periods>]>> = OnceBox::new();
    SLOTS.get_or_init(|| Box::new((0..CAPACITY).map(|_| OnceBox::new()).collect()))
}

/// The index of each calendar by what makes it the same, and the number
/// handed out; taken only to make a calendar.
type Index = (HashMap<Identity, CalendarId>, usize);

fn index() -> &'static Mutex<Index> {
    static INDEX: OnceBox<Mutex<Index>> = OnceBox::new();
    INDEX.get_or_init(|| Box::new(Mutex::new((HashMap::new(), 0))))
}

/// The calendar equal to `periods`, made if there is none yet.
pub(crate) fn intern(periods: Periods) -> Result<CalendarId, ConfigError> {
    let mut index = index().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (ids, made) = &mut *index;
    if let Some(&id) = ids.get(&periods.identity()) {
        return Ok(id);
    }
    if *made == CAPACITY {
        return Err(ConfigError::new(
            "calendar",
            format!("the process already holds {CAPACITY} distinct calendars, the most it keeps"),
        ));
    }
    let slot = *made;
    let identity = periods.identity();
    if slots()[slot].set(Box::new(periods)).is_err() {
        unreachable!("slot {slot} was handed out once, under the index's lock");
    }
    *made += 1;
    let id = CalendarId(NonZeroU16::new(slot as u16 + 1).expect("slot + 1 is at least 1"));
    ids.insert(identity, id);
    Ok(id)
}

/// The calendar behind a handle.
pub(crate) fn get(id: CalendarId) -> &'static Periods {
    slots()[usize::from(id.0.get()) - 1]
        .get()
        .expect("a calendar's handle is made after its slot is filled")
}
