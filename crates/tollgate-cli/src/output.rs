//! Output files (`--decisions`, `--plot`) that never replace anything but a
//! regular file.
//!
//! - A regular file (or a path where nothing exists yet) is written to a
//!   temporary file in the same directory, renamed over the target only once
//!   complete: an error never leaves a partial file, and an existing file
//!   keeps its permissions.
//! - A symbolic link is followed to its final target, and that target is
//!   written as above; the link stays a link.
//! - A FIFO or a character device (`/dev/null`, a terminal) is opened and
//!   written as the output is produced, never replaced; what was written
//!   before an error stays written. So is a file reached through a process's
//!   file descriptors under `/proc` (`/dev/stdout`, `/dev/fd/3`), whatever
//!   it is: replacing its path would not change what the descriptor writes to.
//! - A directory, or any other kind of file, is an error.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

/// How deep a chain of symbolic links may be (as Linux's `ELOOP` limit).
const MAX_LINKS: usize = 40;

/// What a path names once its symbolic links are followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file, or nothing yet: written through a temporary file.
    /// Holds the path with every symbolic link followed.
    File(PathBuf),
    /// A FIFO or character device, written directly.
    Stream,
    /// A directory.
    Directory,
}

/// What `path` names: a file (or nothing), a stream, or a directory.
///
/// # Errors
///
/// An I/O error when a link cannot be read, links loop, or the path names a
/// block device, a socket or anything else that is neither.
pub fn kind(path: &Path) -> io::Result<Kind> {
    // The system follows every link, including the special ones under /proc
    // (/dev/stdout to a pipe names no path at all).
    let meta = match fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let Some(meta) = meta else {
        return Ok(Kind::File(follow_links(path)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "a process's file descriptor that is not open",
            )
        })?));
    };
    let file_type = meta.file_type();
    if file_type.is_file() {
        return Ok(match follow_links(path)? {
            Some(real) => Kind::File(real),
            None => Kind::Stream,
        });
    }
    if file_type.is_dir() {
        return Ok(Kind::Directory);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() || file_type.is_char_device() {
            return Ok(Kind::Stream);
        }
    }
    Err(io::Error::other(
        "not a regular file, FIFO or character device; it is not replaced",
    ))
}

/// `path` with every symbolic link along its last component followed (the
/// directories above it are resolved by the system as usual); `None` when
/// one of the paths on the way is in `/proc`, where links stand for a
/// process's open files rather than paths.
fn follow_links(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut current = path.to_owned();
    for _ in 0..MAX_LINKS {
        let dir = match current.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if fs::canonicalize(dir).is_ok_and(|dir| dir.starts_with("/proc")) {
            return Ok(None);
        }
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Ok(_) => return Ok(Some(current)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(current)),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// An output being written.
pub struct Output {
    /// Where the bytes go.
    sink: Sink,
}

/// Where an output's bytes go.
enum Sink {
    /// A temporary file renamed over `target` when complete.
    Temporary {
        /// The temporary file.
        file: NamedTempFile,
        /// The regular file it replaces, symbolic links followed.
        target: PathBuf,
    },
    /// A FIFO or device, written directly.
    Stream(File),
}

/// A complete output waiting to be moved into place.
pub struct Finished {
    /// What is left to do.
    sink: Sink,
}

impl Output {
    /// Starts the output at `path`; `prefix` and `suffix` name the temporary
    /// file (`.tollgate-decisions-`, `.csv`).
    ///
    /// # Errors
    ///
    /// An I/O error when `path` is a directory or an unsupported kind of
    /// file, or the temporary file (or the stream) cannot be opened.
    pub fn create(path: &Path, prefix: &str, suffix: &str) -> io::Result<Output> {
        let target = match kind(path)? {
            Kind::Directory => {
                return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory"));
            }
            Kind::Stream => {
                let file = OpenOptions::new().write(true).open(path)?;
                return Ok(Output {
                    sink: Sink::Stream(file),
                });
            }
            Kind::File(target) => target,
        };
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(prefix).suffix(suffix);
        match fs::metadata(&target) {
            // Replacing a file keeps its permissions.
            Ok(meta) => {
                builder.permissions(meta.permissions());
            }
            #[cfg(unix)]
            Err(_) => {
                // Like File::create: 0666 less the umask (tempfile defaults to 0600).
                use std::os::unix::fs::PermissionsExt;
                builder.permissions(fs::Permissions::from_mode(0o666));
            }
            #[cfg(not(unix))]
            Err(_) => {}
        }
        let file = builder.tempfile_in(dir)?;
        Ok(Output {
            sink: Sink::Temporary { file, target },
        })
    }

    /// Flushes everything written.
    ///
    /// # Errors
    ///
    /// The I/O error when flushing fails.
    pub fn finish(mut self) -> io::Result<Finished> {
        self.flush()?;
        Ok(Finished { sink: self.sink })
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Temporary { file, .. } => file.write(buf),
            Sink::Stream(file) => file.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Temporary { file, .. } => file.flush(),
            Sink::Stream(file) => file.flush(),
        }
    }
}

impl Finished {
    /// Moves the output into place: renames the temporary file over the
    /// target, unless the target has meanwhile become something other than
    /// a regular file. Nothing to do for a stream.
    ///
    /// # Errors
    ///
    /// The I/O error when the rename fails or the target is no longer a
    /// regular file (the temporary file is removed).
    pub fn persist(self) -> io::Result<()> {
        match self.sink {
            Sink::Stream(_) => Ok(()),
            Sink::Temporary { file, target } => {
                match fs::symlink_metadata(&target) {
                    Ok(meta) if !meta.file_type().is_file() => {
                        return Err(io::Error::other("no longer a regular file; it is not replaced"))
                    }
                    _ => {}
                }
                file.persist(&target).map(drop).map_err(|e| e.error)
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn write(path: &Path, text: &str) -> io::Result<()> {
        let mut out = Output::create(path, ".t-", ".tmp")?;
        out.write_all(text.as_bytes())?;
        out.finish()?.persist()
    }

    #[test]
    fn a_regular_file_is_replaced_only_when_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        fs::write(&path, "old").unwrap();
        let mut out = Output::create(&path, ".t-", ".tmp").unwrap();
        out.write_all(b"new").unwrap();
        let finished = out.finish().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        finished.persist().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn links_are_followed_to_the_last_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("sub/real.csv");
        fs::create_dir(dir.path().join("sub")).unwrap();
        symlink("sub/real.csv", dir.path().join("a")).unwrap();
        symlink("a", dir.path().join("b")).unwrap();
        assert_eq!(
            kind(&dir.path().join("b")).unwrap(),
            Kind::File(dir.path().join("sub/real.csv"))
        );
        write(&dir.path().join("b"), "x").unwrap();
        assert_eq!(fs::read_to_string(&real).unwrap(), "x");
        assert!(fs::symlink_metadata(dir.path().join("b"))
            .unwrap()
            .file_type()
            .is_symlink());
        symlink("loop", dir.path().join("loop")).unwrap();
        assert!(kind(&dir.path().join("loop")).is_err());
    }

    #[test]
    fn a_file_that_stops_being_regular_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let out = Output::create(&path, ".t-", ".tmp").unwrap();
        fs::create_dir(&path).unwrap();
        assert!(out.finish().unwrap().persist().is_err());
        assert!(path.is_dir());
    }

    #[test]
    fn directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(kind(dir.path()).unwrap(), Kind::Directory);
        let err = write(dir.path(), "x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::IsADirectory);
        assert_eq!(kind(Path::new("/dev/null")).unwrap(), Kind::Stream);
    }

    #[test]
    fn descriptors_under_proc_are_streams_even_for_regular_files() {
        use std::os::fd::AsRawFd;
        let (_reader, writer) = io::pipe().unwrap();
        let fd = |raw: i32| PathBuf::from(format!("/dev/fd/{raw}"));
        assert_eq!(kind(&fd(writer.as_raw_fd())).unwrap(), Kind::Stream);
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        let path = fd(file.as_raw_fd());
        assert_eq!(kind(&path).unwrap(), Kind::Stream);
        write(&path, "x").unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("f")).unwrap(), "x");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(kind(Path::new("/proc/self/fd/999999")).is_err());
    }
}
