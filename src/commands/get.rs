//! `get KEY <scope>`: one stored value. Like Airflow 3.3, an expired row that no clean has
//! removed yet is still returned.

use super::{
    Context, Scope, Transport, check_key, describe_asset, mapped_task_hint, require_asset, require_dag_run,
    scope_from_args,
};
use crate::api::Api;
use crate::cli::{GetArgs, GlobalArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::output;
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &GetArgs) -> Result<()> {
    check_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    if let Transport::Api(options) = Transport::choose(global)? {
        return over_api(&Api::open(options)?, global, args, scope);
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    match scope {
        Scope::Task(scope) => {
            let Some(entry) = store.task_entry(&scope, &args.key)? else {
                require_dag_run(&mut store, &scope)?;
                // Without --map-index the scope is the unmapped instance; a mapped task has none.
                let hint = if args.scope.map_index.is_none() {
                    mapped_task_hint(&mut store, &scope)?
                } else {
                    String::new()
                };
                return Err(Error::NotFound(format!(
                    "key {} not found for task {scope}{hint}",
                    quote(&args.key)
                ))
                .into());
            };
            warn_expired(&entry);
            output::emit(ctx.format, &output::entries(&[entry], false, None).single(true))
        }
        Scope::Asset(selector) => {
            let asset = require_asset(&mut store, &selector)?;
            let Some(entry) = store.asset_entry(&asset, &args.key)? else {
                return Err(Error::NotFound(format!(
                    "key {} not found for {}",
                    quote(&args.key),
                    describe_asset(&asset)
                ))
                .into());
            };
            output::emit(ctx.format, &output::entries(&[entry], false, None).single(true))
        }
    }
}

/// `get` over Airflow's REST API: the same documents; the API says "not found" alike for a
/// missing key, task instance or dag run.
fn over_api(api: &Api, global: &GlobalArgs, args: &GetArgs, scope: Scope) -> Result<()> {
    match scope {
        Scope::Task(scope) => {
            let Some(entry) = api.task_entry(&scope, &args.key)? else {
                return Err(
                    Error::NotFound(format!("key {} not found for task {scope}", quote(&args.key))).into()
                );
            };
            warn_expired(&entry);
            output::emit(global.output, &output::entries(&[entry], false, None).single(true))
        }
        Scope::Asset(selector) => {
            let asset = api.asset(&selector)?;
            let Some(entry) = api.asset_entry(&asset, &args.key)? else {
                return Err(Error::NotFound(format!(
                    "key {} not found for {}",
                    quote(&args.key),
                    describe_asset(&asset)
                ))
                .into());
            };
            output::emit(global.output, &output::entries(&[entry], false, None).single(true))
        }
    }
}

/// Airflow 3.3 still returns an expired key; a script should know it is on borrowed time.
fn warn_expired(entry: &crate::model::TaskEntry) {
    if entry.is_expired(crate::time::Timestamp::now()) {
        output::warn(&format!(
            "key {} expired at {} and is still here only until the next clean",
            quote(&entry.key),
            entry.expires_at.as_ref().map(crate::model::StoredTime::display).unwrap_or_default()
        ));
    }
}
