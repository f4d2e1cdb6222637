//! The progress bar of long replays, on standard error.
//!
//! It is drawn only when standard error is a terminal (indicatif hides it
//! otherwise, and when `TERM` is unset or `dumb`), so redirected or captured
//! output never contains it, and only for replays of at least
//! [`THRESHOLD`] decisions, which take long enough to be worth watching.
//! It is cleared when the replay ends, whatever the outcome.

use std::cell::Cell;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The fewest decisions (requests times replays) that get a progress bar.
pub const THRESHOLD: u64 = 200_000;

/// Decisions counted locally before the bar is updated: the bar's counter
/// is shared between threads, so it is touched once per batch.
const BATCH: u64 = 4096;

/// A progress bar over every decision of a run (hidden when not wanted).
pub struct Progress {
    /// The bar, when one is shown.
    bar: Option<ProgressBar>,
    /// Decisions not yet added to the bar.
    pending: Cell<u64>,
}

impl Progress {
    /// A bar for `total` decisions on standard error: hidden below
    /// [`THRESHOLD`] or when standard error is not a terminal.
    pub fn new(total: u64) -> Self {
        Self::with_target(total, ProgressDrawTarget::stderr())
    }

    /// A bar for `total` decisions drawn to `target`.
    fn with_target(total: u64, target: ProgressDrawTarget) -> Self {
        let bar = (total >= THRESHOLD && !target.is_hidden()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), target);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg:>14} [{wide_bar}] {human_pos}/{human_len} decisions, {eta} left",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Self {
            bar,
            pending: Cell::new(0),
        }
    }

    /// Whether a bar is shown.
    #[cfg(test)]
    pub fn is_shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Names what is being replayed now (a strategy or a policy file).
    pub fn stage(&self, name: &str) {
        if let Some(bar) = &self.bar {
            self.flush(bar);
            bar.set_message(name.to_owned());
        }
    }

    /// Counts one decision.
    pub fn tick(&self) {
        if let Some(bar) = &self.bar {
            let pending = self.pending.get() + 1;
            self.pending.set(pending);
            if pending >= BATCH {
                self.flush(bar);
            }
        }
    }

    /// Adds the pending decisions to the bar.
    fn flush(&self, bar: &ProgressBar) {
        bar.inc(self.pending.replace(0));
    }
}

impl Drop for Progress {
    /// Clears the bar, so that the summary or an error starts on a clean
    /// line.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_runs_and_hidden_targets_get_no_bar() {
        assert!(!Progress::with_target(THRESHOLD - 1, ProgressDrawTarget::hidden()).is_shown());
        assert!(!Progress::with_target(THRESHOLD, ProgressDrawTarget::hidden()).is_shown());
        // Test runs capture standard error, which is then not a terminal.
        assert!(!Progress::new(u64::MAX).is_shown());
    }

    /// A terminal that draws nothing but counts as one.
    #[derive(Debug)]
    struct NullTerm;

    impl indicatif::TermLike for NullTerm {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn write_str(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn ticks_reach_the_bar_in_batches() {
        let progress = Progress::with_target(THRESHOLD, ProgressDrawTarget::term_like(Box::new(NullTerm)));
        assert!(progress.is_shown());
        let position = || progress.bar.as_ref().map(ProgressBar::position);
        for _ in 0..BATCH + 5 {
            progress.tick();
        }
        assert_eq!(position(), Some(BATCH));
        progress.stage("token_bucket");
        assert_eq!(position(), Some(BATCH + 5));
        drop(progress);
    }
}
