//! `sandbox`: a throw-away Airflow 3.3 metastore, for trying the tool (the README's demo) and
//! for tests, which add their own dag runs and assets through it on every dialect alike.

use serde::Serialize;

use super::Context;
use crate::cli::{GlobalArgs, SandboxCommand};
use crate::db::{self, Access};
use crate::error::Result;
use crate::ops;
use crate::ops::usage;
use crate::output::{self, Rendered};

pub(crate) fn run(global: &GlobalArgs, command: &SandboxCommand) -> Result<()> {
    super::refuse_api(global, "sandbox")?;
    let ctx = Context::load(global, None)?;
    if matches!(command, SandboxCommand::Create { .. }) && global.conn.is_none() {
        // The configured database is Airflow's own (or the default ~/airflow/airflow.db it
        // would create): a sandbox there would pass for a real metastore.
        return usage(format!(
            "sandbox create needs --conn URL naming the new database: a sandbox is never created at \
             the configured Airflow database ({} from {})",
            ctx.url.redacted(),
            ctx.settings.sql_alchemy_conn.source
        ));
    }
    let mut sandbox = ctx.located(db::open_sandbox(
        &ctx.url,
        ctx.settings.sql_alchemy_schema.value.as_deref(),
        &ctx.timeouts(),
    ))?;
    // The new id is the one thing a caller needs: table and plain print it alone.
    let (doc, id) = match command {
        SandboxCommand::Create { sample_data } => {
            sandbox.create()?;
            if *sample_data {
                ops::sandbox::add_sample_data(sandbox, || ctx.open(Access::ReadWrite))?;
            }
            output::status(&format!(
                "created an Airflow 3.3.2 state-store sandbox at {}{}",
                ctx.url.redacted(),
                if *sample_data { " with sample data" } else { "" }
            ));
            (Sandboxed::Created { created: true, sample_data: *sample_data }, None)
        }
        SandboxCommand::AddDagRun { dag_id, run_id, task_id } => {
            let id = sandbox.add_dag_run(dag_id, run_id)?;
            task_id.iter().try_for_each(|task_id| sandbox.add_task_instance(dag_id, run_id, task_id, -1))?;
            (Sandboxed::DagRun { dag_run_id: id }, Some(id.to_string()))
        }
        SandboxCommand::AddTaskInstance { dag_id, run_id, task_id, map_index } => {
            let indexes = if map_index.is_empty() { vec![-1] } else { map_index.clone() };
            // Every index checked before any is added.
            indexes.iter().try_for_each(|&index| super::check_map_index(index))?;
            for index in &indexes {
                sandbox.add_task_instance(dag_id, run_id, task_id, *index)?;
            }
            (Sandboxed::TaskInstances { task_instances: indexes.len() }, Some(indexes.len().to_string()))
        }
        SandboxCommand::AddAsset { name, uri, inactive } => {
            let id = sandbox.add_asset(name, uri, !inactive)?;
            (Sandboxed::Asset { asset_id: id }, Some(id.to_string()))
        }
    };
    output::emit(ctx.one_value_format(), &Rendered { doc, tables: Vec::new(), plain: id })
}

/// What a sandbox command prints in JSON: `{"created": true, "sample_data": …}`, or the new
/// row's id (`{"dag_run_id": N}`, `{"task_instances": N}`, `{"asset_id": N}`).
#[derive(Serialize)]
#[serde(untagged)]
enum Sandboxed {
    Created { created: bool, sample_data: bool },
    DagRun { dag_run_id: i64 },
    TaskInstances { task_instances: usize },
    Asset { asset_id: i64 },
}
