//! The in-memory backend's state as bytes: what [`MemoryBackend::snapshot`]
//! takes, a file writes atomically, and [`MemoryBackend::restore`] gives
//! back to the tables bound after it, so that counts survive a restart.
//!
//! The format, version 1 (integers little-endian):
//!
//! ```text
//! "tollgate-state\n"  the magic, 15 bytes
//! u32                 the format's version
//! per table:          b'T', u32 name length, the name (the limit's key
//!                     layout with the key left out), u64 entries, then
//!                     per entry: u32 key length, the key, u8 state length,
//!                     the state (the stores' encoding); a table's entries
//!                     may come in several consecutive records of its name
//!                     (a save writes a large table a few shards at a time)
//! b'E', u64 tables, u64 entries, u64 FNV-1a of every byte before it
//! ```
//!
//! The end's table count counts a table once however many records hold it.
//!
//! States hold times since the Unix epoch on the wall clock, so a restored
//! state continues where it was: a window that ended meanwhile is over, a
//! bucket has refilled by the time that passed.
//!
//! [`MemoryBackend::snapshot`]: crate::MemoryBackend::snapshot
//! [`MemoryBackend::restore`]: crate::MemoryBackend::restore

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io;
use std::num::NonZeroU64;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::codec::{decode_state, encode_state_into};
use super::state_write::{fnv1a, write_atomically, Checked, CHUNK, FNV_START};
use crate::strategy::State;

/// The first bytes of every state file.
const MAGIC: &[u8; 15] = b"tollgate-state\n";

/// The version this build writes and reads.
const VERSION: u32 = 1;

/// The longest key a file may hold: far beyond any key a limiter keeps,
/// and a bound on what a corrupt length can make a reader allocate.
const MAX_KEY: usize = 1 << 20;

/// The in-memory backend's state at one moment: every key of every table
/// still bound, encoded.
#[derive(Clone, Default)]
pub struct StateSnapshot {
    /// The tables and entries, encoded as the file's body.
    body: Vec<u8>,
    tables: u64,
    entries: u64,
}

impl fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateSnapshot")
            .field("tables", &self.tables)
            .field("keys", &self.entries)
            .field("bytes", &self.body.len())
            .finish()
    }
}

/// Why a state file was refused. Nothing is restored from a refused file.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// The file is not a tollgate state file, or not one this build reads.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What was found, and where.
        reason: String,
    },
}

impl StateSnapshot {
    /// How many tables (one per limit bound) it holds.
    pub fn tables(&self) -> u64 {
        self.tables
    }

    /// How many keys' states it holds, over every table.
    pub fn keys(&self) -> u64 {
        self.entries
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + self.body.len() + 25);
        self.write_to(&mut out).expect("writing to a vector cannot fail");
        out
    }

    /// Writes the file's bytes to `out`: the header, the body as it is
    /// held, the end with the checksum of all before it.
    fn write_to(&self, out: impl io::Write) -> io::Result<()> {
        let mut out = Checked::new(out, None);
        write_header(&mut out)?;
        out.put(&self.body)?;
        write_end(&mut out, self.tables, self.entries)
    }

    /// Reads a snapshot from a file's bytes, checking all of them.
    ///
    /// # Errors
    ///
    /// A message that says what was found where it is wrong: another
    /// file's beginning, a version this build does not read, a file cut
    /// short, a checksum that does not match, a state that is none.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            let start = &bytes[..bytes.len().min(16)];
            return Err(format!(
                "not a tollgate state file: it begins with {:?}, not {:?}",
                String::from_utf8_lossy(start),
                String::from_utf8_lossy(MAGIC)
            ));
        }
        let mut reader = Reader {
            bytes,
            at: MAGIC.len(),
        };
        let version = reader.u32("the version")?;
        if version != VERSION {
            return Err(format!(
                "format version {version}, which this build does not read (it reads version \
                 {VERSION}{})",
                if version > VERSION {
                    "; the file was written by a newer tollgate"
                } else {
                    ""
                }
            ));
        }
        let body_start = reader.at;
        let (tables, entries) = read_tables(&mut reader, |_, _, _| {})?;
        let body_end = reader.at;
        // The end mark, where the tables stopped.
        reader.u8("a table or the end")?;
        let said = (reader.u64("the table count")?, reader.u64("the key count")?);
        let summed = fnv1a(FNV_START, &bytes[..reader.at]);
        let sum = reader.u64("the checksum")?;
        if sum != summed {
            return Err(format!(
                "the checksum does not match ({sum:#018x} written, {summed:#018x} read): the file \
                 was changed or damaged"
            ));
        }
        if said != (tables, entries) {
            return Err(format!(
                "it says {} tables and {} keys but holds {tables} and {entries}",
                said.0, said.1
            ));
        }
        if reader.at != bytes.len() {
            return Err(format!("{} more bytes after its end", bytes.len() - reader.at));
        }
        Ok(Self {
            body: bytes[body_start..body_end].to_vec(),
            tables,
            entries,
        })
    }

    /// Writes the snapshot to `path` atomically: to a temporary file in
    /// the same directory, flushed to disk, then renamed over `path` (and
    /// the directory flushed), so that a crash leaves the old file or the
    /// new one, never a part. It writes as fast as it can: for a save beside
    /// decisions that must not slow down, see
    /// [`MemoryBackend::save_paced`](crate::MemoryBackend::save_paced).
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] when a step fails; `path` is then as it was.
    pub fn save(&self, path: &Path) -> Result<(), StateFileError> {
        write_atomically(path, |file| self.write_to(file)).map_err(|source| StateFileError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads the snapshot at `path`; `Ok(None)` when there is no file.
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] when it cannot be read,
    /// [`StateFileError::Invalid`] when it is not a state file this build
    /// reads, or is damaged or cut short (saying what was found).
    pub fn load(path: &Path) -> Result<Option<Self>, StateFileError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateFileError::Io {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        Self::from_bytes(&bytes)
            .map(Some)
            .map_err(|reason| StateFileError::Invalid {
                path: path.display().to_string(),
                reason,
            })
    }

    /// The entries by table name, to be restored.
    pub(crate) fn into_tables(self) -> HashMap<Box<[u8]>, Vec<Entry>> {
        let mut tables: HashMap<Box<[u8]>, Vec<Entry>> = HashMap::new();
        let mut reader = Reader {
            bytes: &self.body,
            at: 0,
        };
        // The body was checked when it was read, or made here: nothing
        // fails, and a failure could only leave out the rest.
        let _ = read_tables(&mut reader, |name, key, state| {
            let entries = match tables.get_mut(name) {
                Some(entries) => entries,
                None => tables.entry(name.into()).or_default(),
            };
            entries.push((key.into(), state));
        });
        tables
    }
}

/// Reads tables (`T`, name, entries) from `reader` until its end or the
/// end mark `E` (left unread), calling `visit` with each entry's table
/// name, key and state; returns how many tables and entries. An error says
/// what was found where.
fn read_tables<'a>(
    reader: &mut Reader<'a>,
    mut visit: impl FnMut(&'a [u8], &'a [u8], State),
) -> Result<(u64, u64), String> {
    let (mut tables, mut entries) = (0u64, 0u64);
    let mut last_name: Option<&[u8]> = None;
    while reader.at < reader.bytes.len() {
        match reader.u8("a table or the end")? {
            b'T' => {
                let name = reader.u32("a table's name length")? as usize;
                let name = reader.take(name, "a table's name")?;
                // Consecutive records of one name hold one table.
                if last_name != Some(name) {
                    tables += 1;
                    last_name = Some(name);
                }
                let count = reader.u64("a table's entry count")?;
                for _ in 0..count {
                    let key = reader.u32("a key's length")? as usize;
                    if key > MAX_KEY {
                        return Err(format!(
                            "a key of {key} bytes at byte {}: longer than any key kept",
                            reader.at
                        ));
                    }
                    let key = reader.take(key, "a key")?;
                    let state = usize::from(reader.u8("a state's length")?);
                    let at = reader.at;
                    let state = decode_state(reader.take(state, "a state")?)
                        .map_err(|e| format!("byte {at}: {e}"))?;
                    visit(name, key, state);
                }
                entries += count;
            }
            b'E' => {
                reader.at -= 1;
                break;
            }
            other => {
                return Err(format!(
                    "byte {}: {other:#04x} where a table ('T') or the end ('E') was expected",
                    reader.at - 1
                ))
            }
        }
    }
    Ok((tables, entries))
}

/// Writes the beginning: the magic and the version.
fn write_header(out: &mut Checked<impl io::Write>) -> io::Result<()> {
    out.put(MAGIC)?;
    out.put(&VERSION.to_le_bytes())
}

/// Writes the end: `E`, the counts, and the checksum of all before it.
fn write_end(out: &mut Checked<impl io::Write>, tables: u64, entries: u64) -> io::Result<()> {
    let mut end = [0u8; 17];
    end[0] = b'E';
    end[1..9].copy_from_slice(&tables.to_le_bytes());
    end[9..].copy_from_slice(&entries.to_le_bytes());
    out.put(&end)?;
    out.put(&out.sum().to_le_bytes())
}

/// Reads a file's fields in order, naming what was cut short.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        match self.bytes.get(self.at..self.at.saturating_add(n)) {
            Some(taken) if self.at.checked_add(n).is_some() => {
                self.at += n;
                Ok(taken)
            }
            _ => Err(format!(
                "cut short at byte {} of {}, in {what}",
                self.at,
                self.bytes.len()
            )),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
}

/// A key and its state, as restored.
pub(crate) type Entry = (Box<[u8]>, State);

/// A table (or a handle on one) with its name.
type Named<T> = (Box<[u8]>, T);

/// What can write its entries into a snapshot, a shard at a time: a
/// table of any strategy.
pub(crate) trait Entries: Send + Sync {
    /// How many shards it holds.
    fn shards(&self) -> usize;

    /// Appends the entries of shard `shard` (below [`Self::shards`]) to
    /// `out`, each as `u32` key length, key, `u8` state length, state;
    /// returns how many.
    fn write_shard(&self, shard: usize, out: &mut Vec<u8>) -> u64;
}

/// Appends one entry in the file's encoding.
pub(crate) fn write_entry(out: &mut Vec<u8>, key: &[u8], state: &State) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    let length_at = out.len();
    out.push(0);
    let length = encode_state_into(state, out);
    out[length_at] = length as u8;
}

/// The tables a backend (and its clones) bound, by name, for snapshots;
/// and the state restored for the tables it binds next.
#[derive(Default)]
pub(crate) struct Registry {
    /// Whether tables are recorded: only for a backend that will be saved
    /// (a record costs about a hundred bytes per limit, which a service of
    /// tens of thousands of Envoy limits would pay for nothing).
    recording: AtomicBool,
    live: Mutex<Vec<Named<Weak<dyn Entries>>>>,
    /// The last snapshot's size in bytes, which the next one reserves
    /// (and an eighth more) rather than growing to it.
    last_size: AtomicUsize,
    restored: Mutex<HashMap<Box<[u8]>, Vec<Entry>>>,
}

impl Registry {
    /// Records a table bound under `name` (by a backend that is
    /// [`recording`](Self::recording)), and returns the entries
    /// restored for that name (once: a second table of the name gets none).
    pub(crate) fn bound(&self, name: Box<[u8]>, table: Weak<dyn Entries>) -> Vec<Entry> {
        let restored = self
            .restored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&name)
            .unwrap_or_default();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|(_, t)| t.strong_count() > 0);
        live.push((name, table));
        restored
    }

    /// Records the tables bound from now on.
    pub(crate) fn record(&self) {
        self.recording.store(true, Ordering::Relaxed);
    }

    /// Whether tables are recorded.
    pub(crate) fn recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// Keeps `snapshot`'s entries for the tables bound from now on.
    pub(crate) fn restore(&self, snapshot: StateSnapshot) {
        self.record();
        let mut restored = self.restored.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, entries) in snapshot.into_tables() {
            restored.entry(name).or_default().extend(entries);
        }
    }

    /// The tables still in use, with their names.
    fn live_tables(&self) -> Vec<Named<Arc<dyn Entries>>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|(_, t)| t.strong_count() > 0);
        live.iter()
            .filter_map(|(name, t)| Some((name.clone(), t.upgrade()?)))
            .collect()
    }

    /// Appends every live table's entries to `out` as records (`T`, name,
    /// count, entries), a table's shards gathered into records of at least
    /// [`CHUNK`] bytes (or the table's end), calling `flush(out)` after each
    /// record, which may write `out` out and clear it. Returns how many
    /// tables and entries.
    fn encode(
        &self,
        out: &mut Vec<u8>,
        mut flush: impl FnMut(&mut Vec<u8>) -> io::Result<()>,
    ) -> io::Result<(u64, u64)> {
        let (mut tables, mut entries) = (0, 0);
        for (name, table) in self.live_tables() {
            let (shards, mut shard) = (table.shards(), 0);
            loop {
                let start = out.len();
                out.push(b'T');
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(&name);
                // The count, known once the entries are written after it.
                let count_at = out.len();
                out.extend_from_slice(&[0; 8]);
                let mut count = 0;
                while shard < shards && out.len() - start < CHUNK {
                    count += table.write_shard(shard, out);
                    shard += 1;
                }
                out[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
                entries += count;
                flush(out)?;
                if shard == shards {
                    break;
                }
            }
            tables += 1;
        }
        Ok((tables, entries))
    }

    /// Every live table's entries now.
    pub(crate) fn snapshot(&self) -> StateSnapshot {
        let last = self.last_size.load(Ordering::Relaxed);
        let mut body = Vec::with_capacity(last.saturating_add(last / 8));
        let (tables, entries) = self
            .encode(&mut body, |_| Ok(()))
            .expect("a vector takes every byte");
        self.last_size.store(body.len(), Ordering::Relaxed);
        StateSnapshot {
            body,
            tables,
            entries,
        }
    }

    /// Writes every live table's entries to `path` as a state file,
    /// atomically, a few shards at a time and at most `pace` bytes a
    /// second; returns how many keys it wrote.
    pub(crate) fn save_paced(&self, path: &Path, pace: NonZeroU64) -> Result<u64, StateFileError> {
        let written = write_atomically(path, |file| {
            let mut out = Checked::new(file, Some(pace));
            write_header(&mut out)?;
            let mut records = Vec::with_capacity(2 * CHUNK);
            // Records are written a chunk or more at a time: many small
            // tables make few writes (and few sleeps).
            let (tables, entries) = self.encode(&mut records, |records| {
                if records.len() >= CHUNK {
                    out.put(records)?;
                    records.clear();
                }
                Ok(())
            })?;
            out.put(&records)?;
            write_end(&mut out, tables, entries)?;
            Ok(entries)
        });
        written.map_err(|source| StateFileError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}
