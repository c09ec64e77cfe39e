//! `config show` and `config get`: every option the tool reads, with its value and where it
//! came from (flag, environment, `_cmd`, file and line, default). The database password is
//! always masked.

use serde::Serialize;

use super::Context;
use crate::cli::{ConfigCommand, GlobalArgs};
use crate::config::{Source, Sourced};
use crate::error::{Error, Result};
use crate::ops::usage;
use crate::output::{self, Rendered, Table};

/// One option as shown, and as `config show -o json` prints it: section, key, value (null when
/// unset), source.
#[derive(Serialize)]
struct Shown {
    section: &'static str,
    key: &'static str,
    value: Option<String>,
    source: String,
    /// What the tool makes of a value it reads otherwise than it says (Airflow's
    /// `state_cleanup_batch_size = 0`, which `clean` runs as auto).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl Shown {
    /// Its note on stderr, if it has one.
    fn print_note(&self) {
        if let Some(note) = &self.note {
            output::note(&format!("note: {}.{}: {note}", self.section, self.key));
        }
    }
}

fn shown<T: ToString>(section: &'static str, key: &'static str, s: &Sourced<T>) -> Shown {
    row(section, key, Some(s.value.to_string()), &s.source)
}

/// An option shown with this value, from `source`.
fn row(section: &'static str, key: &'static str, value: Option<String>, source: &Source) -> Shown {
    Shown { section, key, value, source: source.to_string(), note: None }
}

/// `state_cleanup_batch_size` with what `clean` makes of it when that is not what it says.
fn batch_size_shown(s: &Sourced<u64>) -> Shown {
    let note = (s.value == 0).then(|| {
        "clean runs 0 as --batch-size auto (time-sized batches; Airflow writes 0 into every airflow.cfg \
         it generates); --batch-size 0 asks for one transaction"
            .to_string()
    });
    Shown { note, ..shown("state_store", "state_cleanup_batch_size", s) }
}

fn options(ctx: &Context) -> Vec<Shown> {
    let s = &ctx.settings;
    let python_bool = |b: bool| if b { "True" } else { "False" };
    vec![
        shown("state_store", "backend", &s.backend),
        shown("state_store", "default_retention_days", &s.default_retention_days),
        batch_size_shown(&s.state_cleanup_batch_size),
        row(
            "state_store",
            "clear_on_success",
            Some(python_bool(s.clear_on_success.value).to_string()),
            &s.clear_on_success.source,
        ),
        shown("state_store", "max_value_storage_bytes", &s.max_value_storage_bytes),
        shown("state_store", "database_timeout", &s.database_timeout),
        shown("state_store", "cmd_timeout", &s.cmd_timeout),
        row("database", "sql_alchemy_conn", Some(ctx.url.redacted()), &s.sql_alchemy_conn.source),
        row(
            "database",
            "sql_alchemy_schema",
            s.sql_alchemy_schema.value.clone(),
            &s.sql_alchemy_schema.source,
        ),
    ]
}

pub(crate) fn run(global: &GlobalArgs, command: &ConfigCommand) -> Result<()> {
    let ctx = Context::load(global, None)?;
    let all = options(&ctx);
    match command {
        ConfigCommand::Show => {
            let file = ctx.settings.config_file.as_ref().map_or_else(
                || "no configuration file found; Airflow's defaults apply".to_string(),
                |p| format!("configuration file: {}", p.display()),
            );
            output::status(&file);
            let rows = all
                .iter()
                .map(|o| {
                    vec![
                        o.section.to_string(),
                        o.key.to_string(),
                        o.value.clone().unwrap_or_default(),
                        o.source.clone(),
                    ]
                })
                .collect();
            let plain = all
                .iter()
                .map(|o| format!("{}.{}={}", o.section, o.key, o.value.clone().unwrap_or_default()))
                .collect::<Vec<_>>();
            let table = Table { title: None, headers: vec!["section", "key", "value", "source"], rows };
            all.iter().for_each(Shown::print_note);
            output::emit_report(
                ctx.format,
                &Rendered { doc: &all, tables: vec![table], plain: Some(plain.join("\n")) },
            )?;
        }
        ConfigCommand::Get { section, key } => {
            let (section, key) = option_name(section, key.as_deref())?;
            let Some(option) = all.iter().find(|o| o.section == section && o.key == key.to_ascii_lowercase())
            else {
                return Err(Error::NotFound(format!(
                    "[{section}] {key} is not an option state-store reads (see `state-store config show`)"
                ))
                .into());
            };
            let Some(value) = &option.value else {
                return Err(Error::NotFound(format!(
                    "[{section}] {key} is not set (from {})",
                    option.source
                ))
                .into());
            };
            option.print_note();
            let doc = Got { value, source: &option.source, note: option.note.as_deref() };
            output::emit_report(
                ctx.one_value_format(),
                &Rendered { doc, tables: Vec::new(), plain: Some(value.clone()) },
            )?;
        }
    }
    Ok(())
}

/// The option `config get` names: `SECTION KEY`, or `SECTION.KEY` in one word (the form
/// `config show -o plain` prints). Section names hold no dot, so the first one splits.
fn option_name<'a>(first: &'a str, key: Option<&'a str>) -> Result<(&'a str, &'a str)> {
    match (first.split_once('.'), key) {
        (None, Some(key)) => Ok((first, key)),
        (Some((section, key)), None) if !section.is_empty() && !key.is_empty() => Ok((section, key)),
        (Some(_), Some(extra)) => {
            usage(format!("config get takes SECTION KEY or SECTION.KEY, not both: {first} {extra}"))
        }
        _ => usage(format!(
            "config get needs an option: SECTION KEY or SECTION.KEY (e.g. database.sql_alchemy_conn), not {first:?}"
        )),
    }
}

/// What `config get -o json` prints: `{"value": …, "source": …}`.
#[derive(Serialize)]
struct Got<'a> {
    value: &'a str,
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;

    #[test]
    fn sources_read_as_people_write_them() {
        let s = Sourced { value: 7_u64, source: Source::Flag("--batch-size") };
        let o = shown("state_store", "state_cleanup_batch_size", &s);
        assert_eq!((o.value.as_deref(), o.source.as_str()), (Some("7"), "--batch-size flag"));
    }

    #[test]
    fn an_option_is_named_in_two_words_or_one() {
        assert_eq!(
            option_name("database", Some("sql_alchemy_conn")).unwrap(),
            ("database", "sql_alchemy_conn")
        );
        assert_eq!(option_name("database.sql_alchemy_conn", None).unwrap(), ("database", "sql_alchemy_conn"));
        for (first, key) in [("database", None), (".x", None), ("x.", None), ("a.b", Some("c"))] {
            assert!(option_name(first, key).is_err(), "{first} {key:?}");
        }
    }
}
