//! `doctor`: runs [`crate::ops::doctor`]'s checks on the configured metastore and renders them:
//! a table of checks, a sample table for each check that found rows, the settings in use.
//!
//! Read-only. Unlike every other command it does not stop at an unknown schema: it reports it
//! as a failed check, still prints what it knows of the configuration, and then exits 5. Any
//! other problem exits 8 after the report; warnings and information never fail the run.

use serde::Serialize;

use super::Context;
use crate::cli::{DoctorArgs, GlobalArgs};
use crate::db::{self, Access, Diagnosis, Place};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use crate::ops::doctor::{Check, Details, SAMPLE_TEXT_CHARS, Status};
use crate::output::{self, Rendered, Table};
use crate::text::cut;

/// What `doctor -o json` prints.
#[derive(Serialize)]
struct Report<'a> {
    healthy: bool,
    checks: &'a [Check],
}

pub(crate) fn run(global: &GlobalArgs, args: &DoctorArgs) -> Result<()> {
    super::refuse_api(global, "doctor")?;
    let ctx = Context::load(global, None)?;
    let diagnosis = ctx.located(db::diagnose(
        &ctx.url,
        ctx.settings.sql_alchemy_schema.value.as_deref(),
        Access::ReadOnly,
        &ctx.timeouts(),
    ))?;
    let unrecognised =
        if let Diagnosis::Unrecognised(problem) = &diagnosis { Some(problem.clone()) } else { None };
    let checks = crate::ops::doctor::checks(&ctx.settings, &ctx.url, diagnosis, args.sample)?;
    let problems: Vec<&Check> = checks.iter().filter(|c| c.status == Status::Problem).collect();
    let healthy = problems.is_empty();
    output::emit_report(ctx.format, &render(&checks, healthy))?;
    let tally = |status: Status| checks.iter().filter(|c| c.status == status).count();
    let warnings = tally(Status::Warning);
    if let Some(problem) = unrecognised {
        return Err(problem.into_error().into());
    }
    if healthy {
        output::status(&format!(
            "doctor: healthy: {} check(s) ok, {warnings} warning(s), {} skipped",
            tally(Status::Ok),
            tally(Status::Skipped)
        ));
        return Ok(());
    }
    let named: Vec<String> =
        problems.iter().map(|c| format!("{} ({})", c.name, c.count.unwrap_or_default())).collect();
    Err(Error::Unhealthy(format!(
        "doctor found {} problem(s): {}; {warnings} warning(s)",
        problems.len(),
        named.join(", ")
    ))
    .into())
}

fn scope_label(place: &Place) -> String {
    match place {
        Place::Task(s) => crate::model::task_scope_label(&s.dag_id, &s.run_id, &s.task_id, s.map_index),
        Place::DamagedTask { dag_id, run_id, task_id, map_index } => {
            format!("task {dag_id}/{run_id}/{task_id}[{}]", crate::text::quote(map_index))
        }
        Place::Asset { asset_id, asset_name } => {
            crate::model::asset_scope_label(*asset_id, asset_name.as_deref())
        }
    }
}

/// A value of the backend's table: a string as it is, anything else as JSON.
fn detail_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => json::dumps_unicode(other),
    }
}

fn render(checks: &[Check], healthy: bool) -> Rendered<Report<'_>> {
    let mut tables = vec![Table {
        title: None,
        headers: vec!["check", "status", "count", "message"],
        rows: checks
            .iter()
            .map(|c| {
                vec![
                    c.name.to_string(),
                    c.status.name(),
                    c.count.map(|n| n.to_string()).unwrap_or_default(),
                    c.message.clone(),
                ]
            })
            .collect(),
    }];
    for check in checks.iter().filter(|c| !c.sample.is_empty()) {
        tables.push(Table {
            title: Some(format!(
                "{}: {} of {} row(s):",
                check.name,
                check.sample.len(),
                check.count.unwrap_or_default()
            )),
            headers: vec!["scope", "key", "detail"],
            rows: check
                .sample
                .iter()
                .map(|r| vec![scope_label(&r.place), cut(&r.key, SAMPLE_TEXT_CHARS), r.detail.clone()])
                .collect(),
        });
    }
    for check in checks {
        // The settings, each with where it came from: the `_from` fields of its JSON.
        let Details::Backend(backend) = &check.details else { continue };
        let Ok(Value::Object(fields)) = serde_json::to_value(backend) else { continue };
        let rows = fields
            .iter()
            .filter(|(field, _)| !field.ends_with("_from"))
            .map(|(field, value)| {
                let from = fields.get(&format!("{field}_from")).map(detail_text);
                let from = from.map(|source| format!(" (from {source})")).unwrap_or_default();
                vec![field.clone(), format!("{}{from}", detail_text(value))]
            })
            .collect();
        tables.push(Table {
            title: Some(format!("{}:", check.name)),
            headers: vec!["setting", "value"],
            rows,
        });
    }
    let count = |c: &Check| c.count.map(|n| format!(" {n}")).unwrap_or_default();
    let plain: Vec<String> =
        checks.iter().map(|c| format!("{} {}{}", c.name, c.status.name(), count(c))).collect();
    Rendered { doc: Report { healthy, checks }, tables, plain: Some(plain.join("\n")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_in_the_table() {
        assert_eq!(cut("abc", SAMPLE_TEXT_CHARS), "abc");
        let long = "k".repeat(600);
        assert_eq!(cut(&long, SAMPLE_TEXT_CHARS).chars().count(), SAMPLE_TEXT_CHARS);
        assert!(cut(&long, SAMPLE_TEXT_CHARS).ends_with('…'));
    }
}
