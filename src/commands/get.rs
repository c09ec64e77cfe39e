//! `get KEY <scope>`: one stored value. Like Airflow 3.3, an expired row that no clean has
//! removed yet is still returned.

use super::{Scope, check_key, open_keys, scope_from_args};
use crate::cli::{GetArgs, GlobalArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::model::StoredTime;
use crate::output;
use crate::text::quote;
use crate::time::Timestamp;

pub(crate) fn run(global: &GlobalArgs, args: &GetArgs) -> Result<()> {
    check_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    let mut keys = open_keys(global, Access::ReadOnly)?;
    match scope {
        Scope::Task(scope) => {
            let Some(entry) = keys.task_entry(&scope, &args.key)? else {
                return Err(keys.task_key_missing(&scope, &args.key, args.scope.map_index.is_some()));
            };
            // Airflow 3.3 still returns an expired key; a script should know it is on borrowed time.
            if entry.is_expired(Timestamp::now()) {
                output::warn(&format!(
                    "key {} expired at {} and is still here only until the next clean",
                    quote(&entry.key),
                    entry.expires_at.as_ref().map(StoredTime::display).unwrap_or_default()
                ));
            }
            output::emit(global.output, &output::entries(&[entry], false, None).single(true))
        }
        Scope::Asset(selector) => {
            keys.addressable_key(&args.key)?;
            let asset = keys.asset(&selector, false)?;
            let Some(entry) = keys.asset_entry(&asset, &args.key)? else {
                return Err(Error::NotFound(format!(
                    "key {} not found for {}",
                    quote(&args.key),
                    asset.described()
                ))
                .into());
            };
            output::emit(global.output, &output::entries(&[entry], false, None).single(true))
        }
    }
}
