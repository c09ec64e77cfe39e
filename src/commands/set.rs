//! `set KEY VALUE <scope>`: an upsert, written exactly as Airflow writes it: the value as
//! Python's `json.dumps` text, `updated_at` now, and (task scope) `expires_at` from the
//! retention, the explicit instant, or `[state_store] default_retention_days`.
//! `--keep-expiry` is Airflow's REST API PATCH instead: an update of an existing key that
//! keeps its `expires_at`.

use super::{Scope, check_new_key, open_keys, read_stdin, scope_from_args};
use crate::cli::{GlobalArgs, SetArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::json::{self, ParseErrorKind, Value};
use crate::keys::{AssetSet, Expiry, MissingTaskInstance, TaskSet};
use crate::model::StoredTime;
use crate::ops::usage;
use crate::output;
use crate::text::quote;
use crate::time::{self, Timestamp};
use anyhow::Context as _;

pub(crate) fn run(global: &GlobalArgs, args: &SetArgs) -> Result<()> {
    check_new_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    let text = if args.value == "-" { read_stdin()? } else { args.value.clone() };
    let value = parse_value(&text)?;
    let expiry = expiry(args)?;
    let mut keys = open_keys(global, Access::ReadWrite)?;
    match scope {
        Scope::Task(scope) => {
            let set = TaskSet {
                scope: &scope,
                key: &args.key,
                value: &value,
                expiry,
                missing: MissingTaskInstance::from_flag(args.allow_missing_task_instance),
                allow_large: args.allow_large,
            };
            let entry = keys.set_task(&set)?;
            let now = Timestamp::now();
            match expiry {
                // Allowed, as Airflow's REST API allows it, but rarely meant.
                Expiry::At(at) if at < now => output::warn(&format!(
                    "--expires-at {} is in the past: the key is expired from the start, and the next clean deletes it",
                    at.to_rfc3339()
                )),
                Expiry::Keep if entry.is_expired(now) => output::warn(&format!(
                    "key {} expired at {} and --keep-expiry kept that expiry: the next clean deletes it",
                    quote(&entry.key),
                    entry.expires_at.as_ref().map(StoredTime::display).unwrap_or_default()
                )),
                _ => {}
            }
            output::emit(global.output, &output::entries(&[entry], true, None).single(false))
        }
        Scope::Asset(selector) => {
            if args.retention.is_some() || args.expires_at.is_some() {
                return usage("asset keys never expire: --retention and --expires-at are for task keys");
            }
            let set = AssetSet {
                key: &args.key,
                value: &value,
                must_exist: args.keep_expiry,
                allow_large: args.allow_large,
            };
            let entry = keys.set_asset(&selector, &set)?;
            output::emit(global.output, &output::entries(&[entry], true, None).single(false))
        }
    }
}

/// The expiry asked for: `--keep-expiry`, `--expires-at`, `--retention`, or the default
/// retention (`[state_store] default_retention_days`, the configuration's or the API
/// server's), computed at write time as Airflow does.
fn expiry(args: &SetArgs) -> Result<Expiry> {
    if args.keep_expiry {
        return Ok(Expiry::Keep);
    }
    if let Some(text) = &args.expires_at {
        let at = Timestamp::parse_rfc3339(text)
            .with_context(|| Error::Usage("invalid --expires-at".to_string()))?;
        return Ok(Expiry::At(at));
    }
    let retention = args.retention.as_deref().map(time::parse_retention).transpose();
    let retention = retention.with_context(|| Error::Usage("invalid --retention".to_string()))?;
    Ok(retention.map_or(Expiry::Default, Expiry::Retention))
}

/// Parses the user's JSON the way Python's `json.loads` would, and refuses what Airflow
/// refuses: `null` ("Cannot set value as None") and non-finite numbers.
fn parse_value(text: &str) -> Result<Value> {
    let value = json::parse(text).map_err(|e| match e.kind() {
        ParseErrorKind::NonFinite => Error::Usage(format!(
            "invalid value: NaN and Infinity cannot be stored, Airflow refuses them ({e})"
        )),
        ParseErrorKind::TooDeep => Error::Usage(format!(
            "invalid value: nested more than 500 levels deep; Airflow reads values nested at most {} levels deep",
            json::MAX_AIRFLOW_DEPTH
        )),
        // The commonest mistake is an unquoted string: say so when the text starts like one.
        _ if e.to_string().starts_with("Expecting value")
            && text.trim_start().starts_with(char::is_alphabetic) =>
        {
            Error::Usage(format!("invalid value: not JSON: {e} (a string needs quotes: '\"text\"')"))
        }
        _ => Error::Usage(format!("invalid value: not JSON: {e}")),
    })?;
    // Airflow reads values with pydantic, whose parser stops at 200 levels counting the
    // `{"value": …}` wrapper of its API bodies: a value nested deeper cannot be written through
    // Airflow's API, nor read back by a task, so it is refused here too.
    let depth = json::deepest_element(&value);
    if depth > json::MAX_AIRFLOW_DEPTH {
        return usage(format!(
            "invalid value: nested {depth} levels deep; Airflow reads values nested at most {} levels deep",
            json::MAX_AIRFLOW_DEPTH
        ));
    }
    if value.is_null() {
        return usage(
            "invalid value: null cannot be stored (Airflow: \"Cannot set value as None\"); use delete",
        );
    }
    Ok(value)
}
