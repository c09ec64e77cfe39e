//! `delete KEY <scope>`: removes one key. A missing key is a no-op, as in Airflow, but the
//! user is told on stderr; a missing dag run, task instance or asset is "not found".

use serde::Serialize;

use super::{Scope, check_key, open_keys, scope_from_args};
use crate::cli::{DeleteArgs, GlobalArgs};
use crate::db::Access;
use crate::error::Result;
use crate::keys::MissingTaskInstance;
use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &DeleteArgs) -> Result<()> {
    check_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    let mut keys = open_keys(global, Access::ReadWrite)?;
    let (deleted, place) = match scope {
        Scope::Task(scope) => {
            let missing = MissingTaskInstance::from_flag(args.allow_missing_task_instance);
            (keys.delete_task(&scope, &args.key, missing)?, format!("task {scope}"))
        }
        Scope::Asset(selector) => {
            keys.addressable_key(&args.key)?;
            let asset = keys.asset(&selector, false)?;
            (keys.delete_asset(&asset, &args.key)?, asset.described())
        }
    };
    if deleted == 0 {
        output::status(&format!("key {} not found for {place}; nothing deleted", quote(&args.key)));
    } else {
        output::status(&format!("deleted key {} of {place}", quote(&args.key)));
    }
    let doc = Deleted { key: &args.key, deleted };
    output::emit(global.output, &Rendered { doc, tables: Vec::new(), plain: Some(deleted.to_string()) })
}

/// `{"key": …, "deleted": 0 or 1}`.
#[derive(Serialize)]
struct Deleted<'a> {
    key: &'a str,
    deleted: u64,
}
