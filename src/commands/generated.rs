//! Shell completions and the manual page, generated from the same clap definition as the
//! command line itself, so they can never disagree with `--help`.

use clap::CommandFactory;
use std::io::Write;

use crate::cli::{Cli, Shell};
use crate::error::Result;

pub(crate) fn completions(shell: Shell) -> Result<()> {
    let mut command = Cli::command();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    // Rendered into memory first: clap_complete panics on a failed write, and a closed pipe
    // (`state-store completions bash | head`) must end quietly like every other command.
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut command, "state-store", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(())
}

pub(crate) fn man() -> Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    std::io::stdout().lock().write_all(&page)?;
    Ok(())
}
