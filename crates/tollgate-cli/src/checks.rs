//! Early checks of the output flags, `--decisions` and `--plot`, before
//! anything is read or replayed.

use std::path::{Path, PathBuf};

use crate::error::CliError;
use crate::output;

/// Refuses a `--plot` file that is also one of the `decisions` files: one
/// would silently replace the other.
pub fn check_plot_is_not_a_decisions_file(
    plot: Option<&Path>,
    decisions: &[Option<PathBuf>],
) -> Result<(), CliError> {
    let Some(plot) = plot else {
        return Ok(());
    };
    let real = |path: &Path| match output::kind(path) {
        Ok(output::Kind::File(real)) => Some(real),
        _ => None,
    };
    let Some(plot_real) = real(plot) else {
        return Ok(());
    };
    if decisions
        .iter()
        .flatten()
        .any(|d| real(d).as_ref() == Some(&plot_real))
    {
        return Err(CliError::Flag {
            flag: "plot".to_owned(),
            value: plot.display().to_string(),
            reason: "is also a --decisions file".to_owned(),
        });
    }
    Ok(())
}

/// Checks early that `--flag path` can be written: not a directory (unless
/// `directory` allows one), a link loop or a kind of file that is never
/// replaced. Returns what the path names.
pub fn check_output(flag: &str, path: &Path, directory: bool) -> Result<output::Kind, CliError> {
    let error = |reason: String| CliError::Flag {
        flag: flag.to_owned(),
        value: path.display().to_string(),
        reason,
    };
    match output::kind(path) {
        Ok(output::Kind::Directory) if !directory => Err(error("is a directory".to_owned())),
        Ok(kind) => Ok(kind),
        Err(e) => Err(error(e.to_string())),
    }
}
