//! `tollgate completions SHELL`: the completion script of a shell, made from
//! the command-line definitions, so it offers exactly the subcommands and
//! flags this build has.

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

use crate::error::CliError;

/// The long help of `completions`.
pub const COMPLETIONS_ABOUT: &str = "\
Print a shell completion script for tollgate on standard output.

  bash   tollgate completions bash > ~/.local/share/bash-completion/completions/tollgate
  zsh    tollgate completions zsh > ~/.zfunc/_tollgate   (with ~/.zfunc in $fpath)
  fish   tollgate completions fish > ~/.config/fish/completions/tollgate.fish

The Debian package installs the bash, zsh and fish scripts where those shells find them.";

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Writes the completion script of `args.shell` for `command` (the whole
/// command line, `Cli::command()`) to standard output.
pub fn print(args: &CompletionsArgs, command: clap::Command) -> Result<(), CliError> {
    let script = script(args.shell, command);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

/// The completion script of `shell` for `command`, named `tollgate`.
pub fn script(shell: Shell, mut command: clap::Command) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "tollgate", &mut script);
    script
}
