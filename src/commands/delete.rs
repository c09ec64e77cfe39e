//! `delete KEY <scope>`: removes one key. A missing key is a no-op, as in Airflow, but the
//! user is told on stderr; a missing dag run, task instance or asset is "not found".

use serde::Serialize;

use super::{
    Context, Doing, MissingTaskInstance, Scope, Transport, check_key, describe_asset, refuse_over_api,
    require_asset, require_task_instance, scope_from_args,
};
use crate::api::Api;
use crate::cli::{DeleteArgs, GlobalArgs};
use crate::db::Access;
use crate::error::Result;
use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &DeleteArgs) -> Result<()> {
    check_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    if let Transport::Api(options) = Transport::choose(global)? {
        if args.allow_missing_task_instance {
            refuse_over_api(
                "--allow-missing-task-instance",
                "the API refuses a delete in a task instance that does not exist",
            )?;
        }
        let (deleted, place) = over_api(&Api::open(options)?, &args.key, scope)?;
        return report(global.output, &args.key, deleted, &place);
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadWrite)?;
    let (deleted, place) = match scope {
        Scope::Task(scope) => {
            require_task_instance(
                &mut store,
                &scope,
                false,
                MissingTaskInstance::from_flag(args.allow_missing_task_instance),
                Doing::Delete,
            )?;
            (store.delete_task(&scope, &args.key)?, format!("task {scope}"))
        }
        Scope::Asset(selector) => {
            let asset = require_asset(&mut store, &selector)?;
            (store.delete_asset(asset.id, &args.key)?, describe_asset(&asset))
        }
    };
    report(ctx.format, &args.key, deleted, &place)
}

fn report(format: crate::cli::Format, key: &str, deleted: u64, place: &str) -> Result<()> {
    if deleted == 0 {
        output::note(&format!("key {} not found for {place}; nothing deleted", quote(key)));
    } else {
        output::note(&format!("deleted key {} of {place}", quote(key)));
    }
    let doc = Deleted { key, deleted };
    output::emit(format, &Rendered { doc, tables: Vec::new(), plain: Some(deleted.to_string()) })
}

/// `delete` over Airflow's REST API, which answers 204 whether the key was there or not: the
/// key is looked up first, so that the output says whether one was deleted. The DELETE is
/// sent either way, for the API's own check that the task instance exists.
fn over_api(api: &Api, key: &str, scope: Scope) -> Result<(u64, String)> {
    match scope {
        Scope::Task(scope) => {
            let present = api.task_entry(&scope, key)?.is_some();
            api.delete_task(&scope, key)?;
            Ok((u64::from(present), format!("task {scope}")))
        }
        Scope::Asset(selector) => {
            let asset = api.asset(&selector)?;
            let present = api.asset_entry(&asset, key)?.is_some();
            api.delete_asset(&asset, key)?;
            Ok((u64::from(present), describe_asset(&asset)))
        }
    }
}

/// `{"key": …, "deleted": 0 or 1}`.
#[derive(Serialize)]
struct Deleted<'a> {
    key: &'a str,
    deleted: u64,
}
