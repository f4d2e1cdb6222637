//! The `tollgate` command.
//!
//! `tollgate simulate` replays a trace of requests (CSV, or an nginx access
//! log) through one or all of the rate-limiting strategies, or through a
//! policy file's limiter, on the trace's own clock, and reports what each
//! policy admitted. `tollgate check` validates a policy file. `tollgate
//! serve` runs the decision service of `tollgate-server`. `tollgate
//! completions` prints a shell's completion script.

mod args;
mod check;
mod checks;
mod completions;
mod described;
mod envoy_check;
mod error;
mod output;
#[cfg(test)]
mod packaging;
mod plot;
mod policies;
mod postgres_replay;
mod progress;
mod recorder;
mod redis_replay;
mod replay;
mod report;
mod serve;
mod shown;
mod simulate;
mod store_replay;
mod table;
mod targets;
mod trace;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};
use crate::error::CliError;

/// The static (musl) build's allocator: musl's own is several times slower
/// under a service's many small allocations across threads.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::simulate(&args),
        Command::Check(args) => check::check(&args.file),
        Command::Serve(args) => serve::serve(&args),
        Command::Completions(args) => completions::print(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Interrupted) => {
            eprintln!("error: interrupted");
            ExitCode::from(130)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
