//! `delete KEY <scope>`: removes one key. A missing key is a no-op, as in Airflow, but the
//! user is told on stderr; a missing dag run, task instance or asset is "not found".

use serde::Serialize;

use super::{
    Context, Doing, MissingTaskInstance, Scope, check_key, describe_asset, require_asset,
    require_task_instance, scope_from_args,
};
use crate::cli::{DeleteArgs, GlobalArgs};
use crate::db::Access;
use crate::error::Result;
use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &DeleteArgs) -> Result<()> {
    check_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
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
    if deleted == 0 {
        output::note(&format!("key {} not found for {place}; nothing deleted", quote(&args.key)));
    } else {
        output::note(&format!("deleted key {} of {place}", quote(&args.key)));
    }
    let doc = Deleted { key: &args.key, deleted };
    output::emit(ctx.format, &Rendered { doc, tables: Vec::new(), plain: Some(deleted.to_string()) })
}

/// `{"key": …, "deleted": 0 or 1}`.
#[derive(Serialize)]
struct Deleted<'a> {
    key: &'a str,
    deleted: u64,
}
