//! Shell completions and the manual page, generated from the same clap definition as the
//! command line itself: every subcommand, flag and fixed set of values in them is the one
//! `--help` shows. The bash and fish scripts get one correction each on the way out (see
//! [`fix_bash_labels`] and [`fix_fish_unparsed_line`]).

use clap::CommandFactory;
use std::io::Write;

use crate::cli::{Cli, Shell};
use crate::error::Result;

const BIN: &str = "state-store";

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
    clap_complete::generate(generator, &mut command, BIN, &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    match shell {
        Shell::Bash => script = fix_bash_labels(&script, BIN),
        Shell::Fish => script = fix_fish_unparsed_line(&script),
        Shell::Zsh => {}
    }
    std::io::stdout().lock().write_all(script.as_bytes())?;
    Ok(())
}

/// clap_complete's bash script spells the state of a subcommand two ways when the binary's
/// name has a hyphen (clap-rs/clap#6421, open; still so in 4.6.12, the locked version): the
/// loop over the words typed sets `cmd="state__store__subcmd__clean"` (the binary's hyphen as
/// `__`), but the case labels that hold each subcommand's options read
/// `state__subcmd__store__subcmd__clean)` (as `__subcmd__`). No label ever matches, so
/// `state-store clean --b<TAB>` offered nothing. The labels are respelt as the loop spells
/// them. The replacement is a no-op once clap_complete spells both alike; the tests complete in
/// a real bash either way.
fn fix_bash_labels(script: &str, bin: &str) -> String {
    let wrong = format!("{}__subcmd__", bin.replace('-', "__subcmd__"));
    let right = format!("{}__subcmd__", bin.replace('-', "__"));
    if wrong == right { script.to_string() } else { script.replace(&wrong, &right) }
}

/// clap_complete's fish script tells whether a command was typed yet by parsing the words so far
/// with fish's `argparse`, and offers nothing at all (`or return`, a failure) when they do not
/// parse, which they do not while a global flag still waits for its value: `state-store -o <TAB>`
/// offered file names instead of the formats. Words that do not parse yet are taken as holding
/// no command yet, so the check answers "a command is still needed" (`or return 0`) instead.
fn fix_fish_unparsed_line(script: &str) -> String {
    script.replacen("2>/dev/null\n    or return\n", "2>/dev/null\n    or return 0\n", 1)
}

pub(crate) fn man() -> Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    std::io::stdout().lock().write_all(&page)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_labels_are_spelt_as_the_loop_spells_them() {
        let script = "cmd=\"state__store__subcmd__sandbox__subcmd__add__subcmd__dag__subcmd__run\"\n\
                      case \"${cmd}\" in\n        state__store)\n        \
                      state__subcmd__store__subcmd__sandbox__subcmd__add__subcmd__dag__subcmd__run)\n";
        let fixed = fix_bash_labels(script, "state-store");
        assert!(!fixed.contains("state__subcmd__store"), "{fixed}");
        assert_eq!(
            fixed.matches("state__store__subcmd__sandbox__subcmd__add__subcmd__dag__subcmd__run").count(),
            2
        );
        assert_eq!(fix_bash_labels(script, "airflow"), script, "no hyphen, nothing to respell");
    }

    #[test]
    fn fish_needs_a_command_while_the_words_do_not_parse() {
        let script = "    argparse -s (__fish_state_store_global_optspecs) -- $cmd 2>/dev/null\n    or return\n    if set -q argv[1]\n";
        let fixed = fix_fish_unparsed_line(script);
        assert!(fixed.contains("2>/dev/null\n    or return 0\n    if set -q"), "{fixed}");
    }
}
