//! What one replay writes on the way: its decisions file and the plotted
//! key's decisions.

use std::path::PathBuf;

use tollgate::Decision;

use crate::error::CliError;
use crate::output::Finished;
use crate::plot;
use crate::progress::Progress;
use crate::report::DecisionsFile;
use crate::trace::{Request, Trace};

/// The plotted key's decisions: (target index, event).
pub type Events = Vec<(usize, plot::Event)>;

/// What one replay writes on the way: its decisions file, and the plotted
/// key's decisions for the chart; it also moves the progress bar.
pub struct Recorder<'t> {
    /// The progress bar.
    progress: &'t Progress,
    /// The trace, to name keys.
    trace: &'t Trace,
    /// The decisions file being written.
    file: Option<DecisionsFile>,
    /// The key whose decisions are kept.
    plot_key: Option<usize>,
    /// Its decisions so far.
    events: Events,
}

impl<'t> Recorder<'t> {
    /// Starts the decisions file at `output`, if any, with the
    /// [`bound_by`](crate::report::BOUND_BY_COLUMN) column when `bound_by`
    /// is set.
    pub fn new(
        trace: &'t Trace,
        output: Option<PathBuf>,
        bound_by: bool,
        plot_key: Option<usize>,
        progress: &'t Progress,
    ) -> Result<Self, CliError> {
        let file = output
            .map(|path| {
                DecisionsFile::create(&path, bound_by).map_err(|source| CliError::Decisions { path, source })
            })
            .transpose()?;
        Ok(Self {
            progress,
            trace,
            file,
            plot_key,
            events: Vec::new(),
        })
    }

    /// Records one decision of the policy with index `target`.
    pub fn record(&mut self, request: &Request, target: usize, decision: &Decision) -> Result<(), CliError> {
        self.progress.tick();
        if Some(request.key) == self.plot_key {
            self.events.push((
                target,
                plot::Event {
                    nanos: request.nanos,
                    cost: request.cost,
                    allowed: decision.allowed,
                },
            ));
        }
        match self.file.as_mut() {
            Some(f) => f
                .write(
                    request,
                    self.trace.time(request),
                    &self.trace.keys[request.key],
                    decision,
                )
                .map_err(|source| CliError::Decisions {
                    path: f.path().to_owned(),
                    source,
                }),
            None => Ok(()),
        }
    }

    /// The complete decisions file with its path, not yet in place, and the
    /// events.
    pub fn finish(self) -> Result<(Option<(PathBuf, Finished)>, Events), CliError> {
        let finished = match self.file {
            Some(f) => {
                let path = f.path().to_owned();
                match f.finish() {
                    Ok(finished) => Some((path, finished)),
                    Err(source) => return Err(CliError::Decisions { path, source }),
                }
            }
            None => None,
        };
        Ok((finished, self.events))
    }
}

/// Moves the complete decisions file for `path` into place.
pub fn persist(path: PathBuf, f: Finished) -> Result<(), CliError> {
    f.persist().map_err(|source| CliError::Decisions { path, source })
}
