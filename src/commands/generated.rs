//! Shell completions and the manual pages, generated from the same clap definition as the
//! command line itself: every subcommand, flag and fixed set of values in them is the one
//! `--help` shows. The bash script gets one correction on the way out (see [`fix_bash_labels`]);
//! each manual page gets a synopsis of its own (see [`synopsis`]), the sections of its
//! after-help under their own headings, an EXIT STATUS section (both from `help.rs`, which
//! `--help` reads too), and a SEE ALSO section naming the pages it belongs to.

use std::io::Write;
use std::path::Path;

use clap::{Command, CommandFactory};

use crate::cli::{self, Cli, ManArgs, Shell};
use crate::error::{Error, Result};
use crate::help;

const BIN: &str = "state-store";

pub(crate) fn completions(shell: Shell) -> Result<()> {
    let mut command = cli::for_completions();
    let (generator, fix): (_, fn(&str) -> String) = match shell {
        Shell::Bash => (clap_complete::Shell::Bash, |script| fix_bash_labels(script, BIN)),
        Shell::Zsh => (clap_complete::Shell::Zsh, str::to_string),
        Shell::Fish => (clap_complete::Shell::Fish, fix_fish_unparsed_line),
    };
    // Rendered into memory first: clap_complete panics on a failed write, and a closed pipe
    // (`state-store completions bash | head`) must end quietly like every other command.
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut command, BIN, &mut script);
    let script = fix(&String::from_utf8_lossy(&script));
    Ok(std::io::stdout().lock().write_all(script.as_bytes()).map_err(Error::stdout)?)
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

/// `state-store man`: the top page, one command's page, or every page written to a directory.
pub(crate) fn man(args: &ManArgs) -> Result<()> {
    let pages = pages();
    if let Some(dir) = &args.out_dir {
        return write_pages(&pages, dir);
    }
    let wanted = args.command.join(" ");
    let page = pages.iter().find(|page| page.path.join(" ") == wanted).ok_or_else(|| {
        let names: Vec<String> = pages.iter().skip(1).map(|page| page.path.join(" ")).collect();
        Error::Usage(format!("no manual page for '{wanted}'; pages: {}", names.join(", ")))
    })?;
    let page = render(page).map_err(Error::stdout)?;
    Ok(std::io::stdout().lock().write_all(&page).map_err(Error::stdout)?)
}

/// Every page is replaced atomically (`fs::replace`), and every path is checked before the
/// first is written, so a refused one leaves the directory as it was.
fn write_pages(pages: &[Page], dir: &Path) -> Result<()> {
    let failed = |e: std::io::Error| Error::output_file(dir.display().to_string(), e);
    std::fs::create_dir_all(dir).map_err(failed)?;
    let path = |page: &Page| dir.join(format!("{}.1", page.name));
    for page in pages {
        crate::fs::refuse_database("man --out-dir", &path(page))?;
    }
    for page in pages {
        let roff = render(page).map_err(failed)?;
        crate::fs::replace("man --out-dir", "", &path(page), &roff, (crate::fs::default_mode(), None))?;
    }
    crate::output::status(&format!("wrote {} manual pages to {}", pages.len(), dir.display()));
    Ok(())
}

/// One manual page: `state-store-config-show` for `config show`.
struct Page {
    /// The words after `state-store`; empty for the top page.
    path: Vec<String>,
    name: String,
    command: Command,
}

/// Every page, the top page first, then each command's page before its own commands' pages.
/// Each page lists its commands as `state-store-NAME(1)`, so each of them gets a page of its own,
/// down to `sandbox add-dag-run`. clap's `help` commands get none: they are not listed.
fn pages() -> Vec<Page> {
    fn without_help_command(command: Command) -> Command {
        let names: Vec<String> = command.get_subcommands().map(|c| c.get_name().to_string()).collect();
        names.iter().fold(command.disable_help_subcommand(true), |command, name| {
            command.mut_subcommand(name, without_help_command)
        })
    }
    fn walk(command: &Command, path: &[String], pages: &mut Vec<Page>) {
        let name = command.get_display_name().unwrap_or(BIN).to_string();
        pages.push(Page { path: path.to_vec(), name, command: command.clone() });
        for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            walk(sub, &[path, &[sub.get_name().to_string()]].concat(), pages);
        }
    }
    // Built once, as a whole: building names each command `state-store-clean`, … and hands the
    // global flags down, so every page shows --config, --conn and --output too (the REST
    // transport's only where they apply: `cli::scoped`).
    let mut top = cli::scoped(without_help_command(Cli::command()));
    top.build();
    let mut pages = Vec::new();
    walk(&top, &[], &mut pages);
    pages
}

/// A page as clap_mangen draws its parts (title, name, synopsis, description, flags, commands,
/// version), with the rest in the order of man-pages(7): the after-help's sections under their
/// own headings (clap_mangen's `render` would put them all under one named EXTRA), EXIT STATUS,
/// SEE ALSO.
fn render(page: &Page) -> std::io::Result<Vec<u8>> {
    let version = env!("CARGO_PKG_VERSION");
    let path: Vec<&str> = page.path.iter().map(String::as_str).collect();
    let man = clap_mangen::Man::new(page.command.clone()).source(format!("{BIN} {version}"));
    // Each part comes with the roff crate's preamble (the `Aq` string): the page keeps the
    // title's only.
    let part = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> std::io::Result<String> {
        let mut out = Vec::new();
        render(&mut out)?;
        let text = String::from_utf8_lossy(&out).into_owned();
        let body = text.strip_prefix(".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n").unwrap_or(&text);
        Ok(body.to_string())
    };
    let mut head = Vec::new();
    man.render_title(&mut head)?;
    let mut head = String::from_utf8_lossy(&head).into_owned();
    head.push_str(&part(&|w| man.render_name_section(w))?);
    head.push_str(&part(&|w| man.render_synopsis_section(w))?);
    head.push_str(&part(&|w| man.render_description_section(w))?);
    let mut roff = with_synopsis(&head, &synopsis(&page.command)).into_bytes();
    let sections = help::sections(&path);
    for section in sections.iter().filter(|section| section.heading == help::DESCRIPTION) {
        writeln!(roff, ".PP\n{}", roff_body(&section.body))?;
    }
    if page.command.get_arguments().any(|arg| !arg.is_hide_set()) {
        roff.extend_from_slice(man_headings(&part(&|w| man.render_options_section(w))?).as_bytes());
    }
    if page.command.get_subcommands().any(|sub| !sub.is_hide_set()) {
        roff.extend_from_slice(part(&|w| man.render_subcommands_section(w))?.as_bytes());
    }
    writeln!(roff, ".SH \"{}\"", help::EXIT_STATUS)?;
    for exit in help::exit_status(&path) {
        writeln!(roff, ".TP\n\\fB{}\\fR\n{}", roff_escape(&exit.label()), roff_escape(exit.when))?;
    }
    for section in sections {
        if ![help::DESCRIPTION, help::EXIT_STATUS].contains(&section.heading) {
            writeln!(roff, ".SH {}\n{}", section.heading, roff_body(&section.body))?;
        }
    }
    if page.command.get_version().is_some() {
        roff.extend_from_slice(part(&|w| man.render_version_section(w))?.as_bytes());
    }
    if !page.path.is_empty() {
        // A command's page says where the rest is: the exit codes and the configuration are on
        // the top page, and a nested command's siblings on its parent's.
        let mut see_also = vec![BIN.to_string()];
        for depth in 1..page.path.len() {
            see_also.push(format!("{BIN}-{}", page.path[..depth].join("-")));
        }
        let refs: Vec<String> =
            see_also.iter().map(|name| format!("\\fB{}\\fR(1)", name.replace('-', "\\-"))).collect();
        writeln!(roff, ".SH \"SEE ALSO\"\n{}", refs.join(", "))?;
    }
    Ok(roff)
}

/// The REST transport's flags under a heading that reads as a manual page's, `REST TRANSPORT`,
/// with what `--help`'s heading adds in parentheses (what they do, and where the rest is said)
/// in a sentence of the section instead.
fn man_headings(options: &str) -> String {
    let help = format!(".SH \"{}\"", cli::API.to_uppercase());
    options.replace(
        &help,
        ".SH \"REST TRANSPORT\"\nThese flags send the command to Airflow's REST API v2 instead of the \
         database; docs/rest.md of state\\-store's documentation says what differs.",
    )
}

/// A section's text as roff: plain lines filled into paragraphs, indented lines (commands to
/// type) kept as they are, terms as tagged paragraphs.
fn roff_body(body: &help::Body) -> String {
    match body {
        help::Body::Text(text) => {
            let mut out = Vec::new();
            for (n, paragraph) in text.split("\n\n").enumerate() {
                if n > 0 {
                    out.push(".PP".to_string());
                }
                let mut verbatim = false;
                for line in paragraph.lines() {
                    let indented = line.starts_with(' ');
                    if indented != verbatim {
                        out.push(if indented { ".RS 2\n.nf" } else { ".fi\n.RE" }.to_string());
                        verbatim = indented;
                    }
                    // An indented line loses its indent, which `.RS 2` gives back.
                    out.push(roff_line(line.strip_prefix("  ").unwrap_or(line)));
                }
                if verbatim {
                    out.push(".fi\n.RE".to_string());
                }
            }
            out.join("\n")
        }
        help::Body::Terms { lead, terms } => {
            let mut out = vec![roff_line(lead)];
            for (term, text) in *terms {
                out.push(format!(".TP\n\\fB{}\\fR\n{}", roff_escape(term), roff_line(text)));
            }
            out.join("\n")
        }
        help::Body::ExitCodes => String::new(),
    }
}

/// A line of text as roff reads it: escaped, and never taken for a request (a leading `.` or
/// `'`).
fn roff_line(text: &str) -> String {
    let text = roff_escape(text);
    if text.starts_with(['.', '\'']) { format!("\\&{text}") } else { text }
}

/// clap_mangen's page with its SYNOPSIS line (the one text line after `.SH SYNOPSIS`) replaced.
fn with_synopsis(page: &str, synopsis: &str) -> String {
    let Some(at) = page.find(".SH SYNOPSIS\n") else { return page.to_string() };
    let start = at + ".SH SYNOPSIS\n".len();
    let end = page[start..].find('\n').map_or(page.len(), |n| start + n);
    format!("{}{synopsis}{}", &page[..start], &page[end..])
}

/// A command's synopsis in roff: its own flags first, each with the name of its value as
/// `--help` shows it (`[--before TIMESTAMP]`), then the global flags, then its arguments and
/// commands. clap_mangen's own interleaves the command's flags with the global ones, in its
/// sorting, and names no value (`[--before]`).
fn synopsis(command: &Command) -> String {
    let name = command.get_bin_name().unwrap_or_else(|| command.get_name());
    let mut parts = vec![format!("\\fB{}\\fR", roff_escape(name))];
    let flags: Vec<&clap::Arg> =
        command.get_arguments().filter(|arg| !arg.is_positional() && !arg.is_hide_set()).collect();
    let (global, own): (Vec<&clap::Arg>, Vec<&clap::Arg>) =
        flags.into_iter().partition(|arg| arg.is_global_set());
    parts.extend(own.iter().chain(global.iter()).map(|arg| flag(arg)));
    for arg in command.get_positionals().filter(|arg| !arg.is_hide_set()) {
        let names = value_name(arg);
        let many = if arg.get_num_args().is_some_and(|n| n.max_values() > 1) { "..." } else { "" };
        let text = format!("\\fI{}\\fR{many}", roff_escape(&names));
        parts.push(if arg.is_required_set() { text } else { format!("[{text}]") });
    }
    if command.has_subcommands() {
        parts.push("\\fICOMMAND\\fR".to_string());
    }
    parts.join(" ")
}

/// One flag of a synopsis: `[\fB-o\fR|\fB--output\fR \fIFORMAT\fR]`, without the brackets when
/// it is required.
fn flag(arg: &clap::Arg) -> String {
    let mut names: Vec<String> = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("\\fB{}\\fR", roff_escape(&format!("-{short}"))));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("\\fB{}\\fR", roff_escape(&format!("--{long}"))));
    }
    let mut text = names.join("|");
    if arg.get_num_args().is_some_and(|n| n.takes_values()) {
        text.push_str(&format!(" \\fI{}\\fR", roff_escape(&value_name(arg))));
    }
    if arg.is_required_set() { text } else { format!("[{text}]") }
}

/// The name of an argument's value as `--help` shows it (`TIMESTAMP`), or its id's in capitals.
fn value_name(arg: &clap::Arg) -> String {
    arg.get_value_names().map_or_else(
        || arg.get_id().as_str().to_ascii_uppercase(),
        |names| names.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
    )
}

/// Text as roff prints it: a backslash as `\e`, a hyphen as `\-` (a minus sign that man does
/// not break a line at, and that searches for `--flag` find).
fn roff_escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
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

    /// `--help` and the manual page say the same: each command's after-help is its sections of
    /// `help.rs`, and each command has its exit status there.
    #[test]
    fn every_page_has_its_exit_status_and_its_help_after_the_flags() {
        for page in pages() {
            let path: Vec<&str> = page.path.iter().map(String::as_str).collect();
            assert!(!help::exit_status(&path).is_empty(), "no exit status for {path:?}");
            let after = page.command.get_after_help().map(ToString::to_string).unwrap_or_default();
            assert_eq!(after, help::after_help(&path), "the after-help of {path:?}");
        }
    }

    #[test]
    fn every_command_has_a_page_and_help_has_none() {
        let names: Vec<String> = pages().into_iter().map(|page| page.name).collect();
        for name in [
            "state-store",
            "state-store-clean",
            "state-store-config",
            "state-store-config-show",
            "state-store-sandbox-add-dag-run",
            "state-store-man",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.ends_with("-help")), "{names:?}");
    }
}
