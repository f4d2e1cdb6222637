//! How a state file's bytes reach the disk: in order through [`Checked`],
//! which sums them for the file's checksum and can hold them to a pace,
//! and into a temporary file that [`write_atomically`] renames over the
//! old one once it is on the disk.

use std::fs::{self, File};
use std::io::{self, Write};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most a paced save writes between two sleeps: large enough that a
/// write's fixed cost is nothing, small enough to stay in the caches.
pub(crate) const CHUNK: usize = 256 * 1024;

/// The 64-bit FNV-1a hash of no bytes.
pub(crate) const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a, continued from `hash` over `bytes` (from [`FNV_START`]
/// for a whole): detects damage, not tampering.
pub(crate) fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A writer that sums what passes through it (FNV-1a) and, given a pace,
/// writes at most that many bytes a second on average, in chunks of
/// [`CHUNK`] with the thread asleep between them.
pub(crate) struct Checked<W> {
    out: W,
    sum: u64,
    written: u64,
    pace: Option<(Instant, NonZeroU64)>,
}

impl<W: Write> Checked<W> {
    /// Writes to `out`, at most `pace` bytes a second from now when given.
    pub(crate) fn new(out: W, pace: Option<NonZeroU64>) -> Self {
        Self {
            out,
            sum: FNV_START,
            written: 0,
            pace: pace.map(|pace| (Instant::now(), pace)),
        }
    }

    /// Writes `bytes`, summing them; a chunk at a time, each summed just
    /// before it is written (while it is in the caches).
    pub(crate) fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        for chunk in bytes.chunks(CHUNK) {
            self.sum = fnv1a(self.sum, chunk);
            self.out.write_all(chunk)?;
            self.written += chunk.len() as u64;
            if let Some((started, pace)) = self.pace {
                let due = started + Duration::from_secs_f64(self.written as f64 / pace.get() as f64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        }
        Ok(())
    }

    /// The sum of every byte written so far.
    pub(crate) fn sum(&self) -> u64 {
        self.sum
    }
}

/// Writes a file at `path` atomically: `write` fills a new temporary file
/// in the same directory, which is flushed to the disk, then renamed over
/// `path` (and the directory flushed), so that a crash leaves the old file
/// or the new one, never a part. On an error the temporary file is
/// removed and `path` is as it was.
pub(crate) fn write_atomically<T>(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<T>,
) -> io::Result<T> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "state".into(), |n| n.to_string_lossy());
    let (temp, mut file) = tempfile_in(dir, &name)?;
    let written = (|| {
        let value = write(&mut file)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        // The rename itself reaches the disk with its directory.
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(value)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// A file in `dir` named after `name`, created new.
fn tempfile_in(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    for attempt in 0u32..100 {
        let path = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        match File::options().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary file name beside the state file",
    ))
}
