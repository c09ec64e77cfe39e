//! `set KEY VALUE <scope>`: an upsert, written exactly as Airflow writes it: the value as
//! Python's `json.dumps` text, `updated_at` now, and (task scope) `expires_at` from the
//! retention, the explicit instant, or `[state_store] default_retention_days`.
//! `--keep-expiry` is Airflow's REST API PATCH instead: an update of an existing key that
//! keeps its `expires_at`.

use super::{
    Context, Doing, MissingTaskInstance, Scope, Transport, check_new_key, describe_asset, read_stdin,
    refuse_over_api, require_asset, require_task_instance, scope_from_args,
};
use crate::api::{Api, Expiry};
use crate::cli::{GlobalArgs, SetArgs};
use crate::db::{Access, AssetWrite, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::json::{self, ParseErrorKind, Value};
use crate::model::{AssetEntry, StoredTime, TaskEntry};
use crate::output;
use crate::text::quote;
use crate::time::{self, Retention, Timestamp};
use anyhow::Context as _;

pub(crate) fn run(global: &GlobalArgs, args: &SetArgs) -> Result<()> {
    check_new_key(&args.key)?;
    let scope = scope_from_args(&args.scope)?;
    let text = if args.value == "-" { read_stdin()? } else { args.value.clone() };
    let value = parse_value(&text)?;
    if let Transport::Api(options) = Transport::choose(global)? {
        check_api_flags(args, &scope)?;
        let expiry = if args.keep_expiry { None } else { Some(api_expiry(args, Timestamp::now())?) };
        return over_api(&Api::open(options)?, global, args, scope, &value, expiry);
    }
    let ctx = Context::load(global, None)?;
    let encoded = json::dumps(&value);
    check_size(&ctx, &encoded, args.allow_large)?;
    let now = Timestamp::now();

    match scope {
        Scope::Task(scope) => {
            // --keep-expiry keeps the stored one: the configured default does not apply.
            let expires_at = if args.keep_expiry { None } else { expiry(&ctx, args, now)? };
            let mut store = ctx.open(Access::ReadWrite)?;
            let dag_run_id = require_task_instance(
                &mut store,
                &scope,
                false,
                MissingTaskInstance::from_flag(args.allow_missing_task_instance),
                Doing::Set,
            )?;
            let write = TaskWrite {
                dag_run_id,
                scope: &scope,
                key: &args.key,
                value: &encoded,
                updated_at: now,
                expires_at,
            };
            if args.keep_expiry {
                let entry = keep_expiry(&mut store, &write)?;
                return output::emit(ctx.format, &output::entries(&[entry], true, None).single(false));
            }
            store.upsert_task(&write)?;
            warn_past(expires_at, now);
            let entry = TaskEntry {
                scope,
                key: args.key.clone(),
                value: encoded,
                updated_at: StoredTime::At(now),
                expires_at: expires_at.map(StoredTime::At),
            };
            output::emit(ctx.format, &output::entries(&[entry], true, None).single(false))
        }
        Scope::Asset(selector) => {
            if args.retention.is_some() || args.expires_at.is_some() {
                return Err(Error::Usage(
                    "asset keys never expire: --retention and --expires-at are for task keys".to_string(),
                )
                .into());
            }
            let mut store = ctx.open(Access::ReadWrite)?;
            let asset = require_asset(&mut store, &selector)?;
            if !asset.active {
                return Err(Error::NotFound(format!(
                    "{} is inactive: its keys are removed by the next clean, so state-store does not write to it",
                    describe_asset(&asset)
                )).into());
            }
            let write = AssetWrite { asset_id: asset.id, key: &args.key, value: &encoded, updated_at: now };
            if args.keep_expiry {
                // Asset keys have no expiry: this is a set of a key that must exist.
                if store.update_asset_value(&write)? == 0 {
                    return Err(Error::NotFound(format!(
                        "key {} not found for {}; --keep-expiry changes only an existing key",
                        quote(&args.key),
                        describe_asset(&asset)
                    ))
                    .into());
                }
            } else {
                store.upsert_asset(&write)?;
            }
            let entry = AssetEntry {
                asset_id: asset.id,
                asset_name: Some(asset.name.clone()),
                asset_uri: Some(asset.uri.clone()),
                key: args.key.clone(),
                value: encoded,
                updated_at: StoredTime::At(now),
                last_updated_by_kind: Some("api".to_string()),
                last_updated_by_dag_id: None,
                last_updated_by_run_id: None,
                last_updated_by_task_id: None,
                last_updated_by_map_index: None,
            };
            output::emit(ctx.format, &output::entries(&[entry], true, None).single(false))
        }
    }
}

/// `--keep-expiry`: Airflow's PATCH, which keeps `expires_at` and rewrites the value and
/// `updated_at`, as one UPDATE of the existing row, so that a key deleted meanwhile is never
/// written back by an insert. The row is read back in the same transaction for the output.
fn keep_expiry(store: &mut Store, write: &TaskWrite<'_>) -> Result<TaskEntry> {
    store.begin()?;
    let updated = (|| {
        let changed = store.update_task_value(write)?;
        let entry = store.task_entry(write.scope, write.key)?;
        // MySQL counts changed rows: 0 with the row found means it already held exactly this
        // value and this updated_at; anything else found after a 0 was inserted by another
        // session after the UPDATE, and the update did not happen.
        Ok(entry.filter(|e| {
            changed > 0 || (e.value == write.value && e.updated_at == StoredTime::At(write.updated_at))
        }))
    })();
    match updated {
        Ok(Some(entry)) => {
            store.commit()?;
            warn_kept_expired(&entry, write.updated_at);
            Ok(entry)
        }
        Ok(None) => {
            store.rollback()?;
            Err(Error::NotFound(format!(
                "key {} not found for task {}; --keep-expiry changes only an existing key",
                quote(write.key),
                write.scope
            ))
            .into())
        }
        Err(e) => {
            let _ = store.rollback();
            Err(e)
        }
    }
}

/// An expiry in the past is allowed, as Airflow's REST API allows it, but rarely meant.
fn warn_past(expires_at: Option<Timestamp>, now: Timestamp) {
    if let Some(at) = expires_at.filter(|at| *at < now) {
        output::warn(&format!(
            "--expires-at {} is in the past: the key is expired from the start, and the next clean deletes it",
            at.to_rfc3339()
        ));
    }
}

fn warn_kept_expired(entry: &TaskEntry, now: Timestamp) {
    if entry.is_expired(now) {
        output::warn(&format!(
            "key {} expired at {} and --keep-expiry kept that expiry: the next clean deletes it",
            quote(&entry.key),
            entry.expires_at.as_ref().map(StoredTime::display).unwrap_or_default()
        ));
    }
}

/// The flags the REST API cannot honour, refused before anything is sent.
fn check_api_flags(args: &SetArgs, scope: &Scope) -> Result<()> {
    if args.allow_missing_task_instance {
        refuse_over_api(
            "--allow-missing-task-instance",
            "the API refuses a write to a task instance that does not exist",
        )?;
    }
    if args.allow_large {
        refuse_over_api(
            "--allow-large",
            "the API refuses a value over its [state_store] max_value_storage_bytes",
        )?;
    }
    if let Scope::Asset(_) = scope {
        if args.retention.is_some() || args.expires_at.is_some() {
            return Err(Error::Usage(
                "asset keys never expire: --retention and --expires-at are for task keys".to_string(),
            )
            .into());
        }
        if args.keep_expiry {
            refuse_over_api("--keep-expiry on an asset key", "the API has no PATCH for asset keys")?;
        }
    }
    Ok(())
}

/// `set` over Airflow's REST API: PUT (PATCH for `--keep-expiry`), then the key as stored
/// read back, so that the output shows the server's own `updated_at` and expiry (the default
/// retention is the server's).
fn over_api(
    api: &Api,
    global: &GlobalArgs,
    args: &SetArgs,
    scope: Scope,
    value: &Value,
    expiry: Option<Expiry>,
) -> Result<()> {
    let now = Timestamp::now();
    match scope {
        Scope::Task(scope) => {
            match expiry {
                None => api.patch_task(&scope, &args.key, value)?,
                Some(expiry) => {
                    api.put_task(&scope, &args.key, value, expiry)?;
                    warn_past(if let Expiry::At(at) = expiry { Some(at) } else { None }, now);
                }
            }
            let entry = api.task_entry(&scope, &args.key)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "key {} was written but is gone already: another client deleted it",
                    quote(&args.key)
                ))
            })?;
            if args.keep_expiry {
                warn_kept_expired(&entry, now);
            }
            output::emit(global.output, &output::entries(&[entry], true, None).single(false))
        }
        Scope::Asset(selector) => {
            let asset = api.asset_to_write(&selector)?;
            if !asset.active {
                return Err(Error::NotFound(format!(
                    "{} is inactive: its keys are removed by the next clean, so state-store does not write to it",
                    describe_asset(&asset)
                ))
                .into());
            }
            api.put_asset(&asset, &args.key, value)?;
            let entry = api.asset_entry(&asset, &args.key)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "key {} was written but is gone already: another client deleted it",
                    quote(&args.key)
                ))
            })?;
            output::emit(global.output, &output::entries(&[entry], true, None).single(false))
        }
    }
}

/// The expiry a PUT sends: `--expires-at`, `--retention` from now, or the server's default.
fn api_expiry(args: &SetArgs, now: Timestamp) -> Result<Expiry> {
    if let Some(text) = &args.expires_at {
        let at = Timestamp::parse_rfc3339(text)
            .with_context(|| Error::Usage("invalid --expires-at".to_string()))?;
        return Ok(Expiry::At(at));
    }
    let Some(text) = &args.retention else { return Ok(Expiry::Default) };
    let retention =
        time::parse_retention(text).with_context(|| Error::Usage("invalid --retention".to_string()))?;
    let at =
        retention.expires_at(now).with_context(|| Error::Usage("cannot compute the expiry".to_string()))?;
    Ok(at.map_or(Expiry::Never, Expiry::At))
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
        return Err(Error::Usage(format!(
            "invalid value: nested {depth} levels deep; Airflow reads values nested at most {} levels deep",
            json::MAX_AIRFLOW_DEPTH
        ))
        .into());
    }
    if value.is_null() {
        return Err(Error::Usage(
            "invalid value: null cannot be stored (Airflow: \"Cannot set value as None\"); use delete"
                .to_string(),
        )
        .into());
    }
    Ok(value)
}

fn check_size(ctx: &Context, encoded: &str, allow_large: bool) -> Result<()> {
    let limit = &ctx.settings.max_value_storage_bytes;
    let size = encoded.len() as u64;
    if limit.value > 0 && size > limit.value && !allow_large {
        return Err(Error::Usage(format!(
            "the value is {size} bytes as stored, over [state_store] max_value_storage_bytes = {} (from {}); \
             pass --allow-large to write it anyway",
            limit.value, limit.source
        ))
        .into());
    }
    Ok(())
}

/// The task row's `expires_at`: `--expires-at`, `--retention`, or the configured default
/// (`default_retention_days = 0` means never), computed at write time as Airflow does.
fn expiry(ctx: &Context, args: &SetArgs, now: Timestamp) -> Result<Option<Timestamp>> {
    if let Some(text) = &args.expires_at {
        let at = Timestamp::parse_rfc3339(text)
            .with_context(|| Error::Usage("invalid --expires-at".to_string()))?;
        return Ok(Some(at));
    }
    let retention = match &args.retention {
        Some(text) => {
            time::parse_retention(text).with_context(|| Error::Usage("invalid --retention".to_string()))?
        }
        None => {
            let days = &ctx.settings.default_retention_days;
            Retention::from_default_retention_days(i64::from(days.value)).map_err(|e| {
                Error::Config(format!(
                    "invalid [state_store] default_retention_days (from {}): {e}",
                    days.source
                ))
            })?
        }
    };
    retention.expires_at(now).with_context(|| Error::Usage("cannot compute the expiry".to_string()))
}
