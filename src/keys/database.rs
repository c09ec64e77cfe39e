//! The database transport of the per-scope commands: [`Keys`] over the metastore's tables
//! ([`Store`]), written exactly as Airflow writes them. The configuration is read before the
//! transport is made; the database is opened at the first call that needs it, after what can
//! be checked without it (a value's size, the configured retention).

use crate::archive::Sink;
use crate::config::Settings;
use crate::db::{AssetWrite, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::json;
use crate::keys::{AssetSet, Each, Expiry, Keys, MissingTaskInstance, TaskSet};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, Cleared, Page, StoredTime, TaskEntry, TaskFilter,
    TaskScope, uri_likeness,
};
use crate::output;
use crate::text::quote;
use crate::time::{Retention, Timestamp};
use anyhow::{Context as _, bail};

/// Opens the metastore, at the transport's first call that needs it.
pub(crate) type Open = Box<dyn FnMut() -> Result<Store>>;

pub(crate) struct Database {
    settings: Settings,
    open: Open,
    store: Option<Store>,
}

impl Database {
    pub(crate) fn new(settings: Settings, open: Open) -> Database {
        Database { settings, open, store: None }
    }

    fn store(&mut self) -> Result<&mut Store> {
        let store = self.store.take().map_or_else(|| (self.open)(), Ok)?;
        Ok(self.store.insert(store))
    }

    /// A value's size as stored, against `[state_store] max_value_storage_bytes`.
    fn check_size(&self, encoded: &str, allow_large: bool) -> Result<()> {
        let limit = &self.settings.max_value_storage_bytes;
        let size = encoded.len() as u64;
        if limit.value > 0 && size > limit.value && !allow_large {
            bail!(Error::Usage(format!(
                "the value is {size} bytes as stored, over [state_store] max_value_storage_bytes = {} (from {}); \
                 pass --allow-large to write it anyway",
                limit.value, limit.source
            )));
        }
        Ok(())
    }

    /// The `expires_at` of a write at `now`; `--keep-expiry` keeps the stored one, so the
    /// configured default does not apply.
    fn expires_at(&self, expiry: Expiry, now: Timestamp) -> Result<Option<Timestamp>> {
        let retention = match expiry {
            Expiry::Keep => return Ok(None),
            Expiry::At(at) => return Ok(Some(at)),
            Expiry::Retention(retention) => retention,
            Expiry::Default => {
                let days = &self.settings.default_retention_days;
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
}

impl Keys for Database {
    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        self.store()?.task_entry(scope, key)
    }

    fn task_key_missing(&mut self, scope: &TaskScope, key: &str, map_index_given: bool) -> anyhow::Error {
        let missing = (|| -> Result<anyhow::Error> {
            let store = self.store()?;
            require_dag_run(store, scope)?;
            // Without --map-index the scope is the unmapped instance; a mapped task has none.
            let hint = if map_index_given { String::new() } else { mapped_task_hint(store, scope)? };
            Ok(Error::NotFound(format!("key {} not found for task {scope}{hint}", quote(key))).into())
        })();
        missing.unwrap_or_else(|e| e)
    }

    fn set_task(&mut self, set: &TaskSet<'_>) -> Result<TaskEntry> {
        let encoded = json::dumps(set.value);
        self.check_size(&encoded, set.allow_large)?;
        let now = Timestamp::now();
        let expires_at = self.expires_at(set.expiry, now)?;
        let store = self.store()?;
        let dag_run_id = require_task_instance(store, set.scope, false, set.missing, Doing::Set)?;
        let write = TaskWrite {
            dag_run_id,
            scope: set.scope,
            key: set.key,
            value: &encoded,
            updated_at: now,
            expires_at,
        };
        if set.expiry == Expiry::Keep {
            return keep_expiry(store, &write);
        }
        store.upsert_task(&write)?;
        Ok(TaskEntry {
            scope: set.scope.clone(),
            key: set.key.to_string(),
            value: encoded,
            updated_at: StoredTime::At(now),
            expires_at: expires_at.map(StoredTime::At),
        })
    }

    fn delete_task(&mut self, scope: &TaskScope, key: &str, missing: MissingTaskInstance) -> Result<u64> {
        let store = self.store()?;
        require_task_instance(store, scope, false, missing, Doing::Delete)?;
        store.delete_task(scope, key)
    }

    fn count_task_keys(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        missing: MissingTaskInstance,
    ) -> Result<u64> {
        let store = self.store()?;
        require_task_instance(store, scope, all_map_indices, missing, Doing::Clear)?;
        store.count_task_scope(scope, all_map_indices)
    }

    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        self.store()?.clear_task(scope, all_map_indices)
    }

    /// Exactly the rows archived, by id, page by page: see [`crate::ops::clear`].
    fn archive_clear_task(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        sink: &mut Sink,
    ) -> Result<Cleared> {
        crate::ops::clear::task(self.store()?, scope, all_map_indices, sink)
    }

    fn each_task(&mut self, filter: &TaskFilter, page: Page, each: Each<'_, TaskEntry>) -> Result<()> {
        self.store()?.each_task(filter, page, each)
    }

    fn asset(&mut self, selector: &AssetSelector, _to_write: bool) -> Result<Asset> {
        require_asset(self.store()?, selector)
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        self.store()?.asset_entry(asset, key)
    }

    fn set_asset(&mut self, selector: &AssetSelector, set: &AssetSet<'_>) -> Result<AssetEntry> {
        let encoded = json::dumps(set.value);
        self.check_size(&encoded, set.allow_large)?;
        let asset = &self.active_asset(selector)?;
        let store = self.store()?;
        let now = Timestamp::now();
        let write = AssetWrite { asset_id: asset.id, key: set.key, value: &encoded, updated_at: now };
        if set.must_exist {
            if store.update_asset_value(&write)? == 0 {
                bail!(Error::NotFound(format!(
                    "key {} not found for {}; --keep-expiry changes only an existing key",
                    quote(set.key),
                    asset.described()
                )));
            }
        } else {
            store.upsert_asset(&write)?;
        }
        Ok(AssetEntry {
            asset_id: asset.id,
            asset_name: Some(asset.name.clone()),
            asset_uri: Some(asset.uri.clone()),
            key: set.key.to_string(),
            value: encoded,
            updated_at: StoredTime::At(now),
            last_updated_by_kind: Some("api".to_string()),
            last_updated_by_dag_id: None,
            last_updated_by_run_id: None,
            last_updated_by_task_id: None,
            last_updated_by_map_index: None,
        })
    }

    fn delete_asset(&mut self, asset: &Asset, key: &str) -> Result<u64> {
        self.store()?.delete_asset(asset.id, key)
    }

    fn count_asset_keys(&mut self, asset: &Asset) -> Result<u64> {
        self.store()?.count_asset_scope(asset.id)
    }

    fn clear_asset(&mut self, asset: &Asset) -> Result<u64> {
        self.store()?.clear_asset(asset.id)
    }

    /// Exactly the keys archived, with the `updated_at` archived: see [`crate::ops::clear`].
    fn archive_clear_asset(&mut self, asset: &Asset, sink: &mut Sink) -> Result<Cleared> {
        crate::ops::clear::asset(self.store()?, asset.id, sink)
    }

    fn each_asset(
        &mut self,
        asset: Option<&Asset>,
        external_only: bool,
        page: Page,
        each: Each<'_, AssetEntry>,
    ) -> Result<()> {
        let filter = AssetFilter { asset_id: asset.map(|a| a.id), external_only };
        self.store()?.each_asset(&filter, page, each)
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
        Ok(Some(entry)) => store.commit().map(|()| entry),
        Ok(None) => {
            store.rollback()?;
            bail!(Error::NotFound(format!(
                "key {} not found for task {}; --keep-expiry changes only an existing key",
                quote(write.key),
                write.scope
            )))
        }
        Err(e) => {
            let _ = store.rollback();
            Err(e)
        }
    }
}

/// The dag run of a task scope must exist: the tool never creates one, and a write without it
/// would violate Airflow's foreign key.
pub(crate) fn require_dag_run(store: &mut Store, scope: &TaskScope) -> Result<i64> {
    store.dag_run_id(&scope.dag_id, &scope.run_id)?.ok_or_else(|| {
        Error::NotFound(format!(
            "no dag run found for dag_id={} run_id={}",
            quote(&scope.dag_id),
            quote(&scope.run_id)
        ))
        .into()
    })
}

/// At most this many task ids are named when a task instance is not found.
const TASK_HINT: u64 = 10;

/// The dag run of a task scope, whose task instance must exist too (any instance of the task
/// with `all_map_indices`): Airflow's REST API answers "Task instance not found" to a set,
/// delete or clear of a task instance the scheduler never created, since a key written there
/// is one no task will ever read. `doing` is the command asking.
pub(crate) fn require_task_instance(
    store: &mut Store,
    scope: &TaskScope,
    all_map_indices: bool,
    missing: MissingTaskInstance,
    doing: Doing,
) -> Result<i64> {
    let dag_run_id = require_dag_run(store, scope)?;
    if store.task_instance_exists(scope, all_map_indices)? {
        return Ok(dag_run_id);
    }
    let what = if all_map_indices {
        format!("no task instance of {}", scope.task_label())
    } else {
        format!("task instance not found: {scope}")
    };
    let (hint, mapped) = task_instance_hint(store, scope)?;
    match missing {
        MissingTaskInstance::Allow => {
            output::warn(&format!("{what}{hint}; going on (--allow-missing-task-instance)"));
            Ok(dag_run_id)
        }
        // The unmapped index of a mapped task: the user forgot --map-index, and a key written
        // there no instance would read, so the flag that writes it anyway is the wrong advice.
        MissingTaskInstance::Refuse if mapped && scope.map_index == -1 && !all_map_indices => {
            let all = if doing == Doing::Clear { " or --all-map-indices" } else { "" };
            Err(Error::NotFound(format!("{what}{hint}; give --map-index N{all}")).into())
        }
        MissingTaskInstance::Refuse => bail!(Error::NotFound(format!(
            "{what}{hint}; pass --allow-missing-task-instance to {} anyway",
            doing.verb()
        ))),
    }
}

/// The command that needs a task instance, for the advice it gets when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doing {
    Set,
    Delete,
    Clear,
}

impl Doing {
    /// What `--allow-missing-task-instance` lets the command do.
    fn verb(self) -> &'static str {
        match self {
            Doing::Set => "write the key",
            Doing::Delete => "delete the key",
            Doing::Clear => "clear its keys",
        }
    }
}

/// What the dag run does hold, when a task instance is not found: the map indexes of the task
/// when it exists under others, else the run's task ids when there are few; and whether the
/// task is mapped (its instances have map indexes 0 and up).
fn task_instance_hint(store: &mut Store, scope: &TaskScope) -> Result<(String, bool)> {
    let found = store.task_instances_hint(&scope.dag_id, &scope.run_id, &scope.task_id, TASK_HINT)?;
    if let Some((count, low, high)) = found.map_indexes {
        let task = quote(&scope.task_id);
        let hint = match (count, low, high) {
            (_, -1, -1) => format!("; task {task} is not mapped (map index -1)"),
            (1, low, _) => format!("; task {task} has one instance, map index {low}"),
            (count, low, high) => format!("; task {task} has {count} instances, map indexes {low} to {high}"),
        };
        return Ok((hint, low >= 0));
    }
    let hint = match found.task_count {
        0 => "; the dag run has no task instances yet".to_string(),
        n if n <= TASK_HINT => {
            let names: Vec<String> = found.task_ids.iter().map(|t| quote(t)).collect();
            format!("; the dag run's task{}: {}", if n == 1 { "" } else { "s" }, names.join(", "))
        }
        n => format!("; the dag run has {n} tasks"),
    };
    Ok((hint, false))
}

/// When the task of `scope` is mapped (its instances have map indexes 0 and up), a hint to give
/// `--map-index`; empty otherwise.
pub(crate) fn mapped_task_hint(store: &mut Store, scope: &TaskScope) -> Result<String> {
    let found = store.task_instances_hint(&scope.dag_id, &scope.run_id, &scope.task_id, 0)?;
    Ok(match found.map_indexes {
        Some((_, low, high)) if low >= 0 => {
            format!(
                "; task {} is mapped (map indexes {low} to {high}): give --map-index",
                quote(&scope.task_id)
            )
        }
        _ => String::new(),
    })
}

/// Resolves an asset selector. Names and URIs address active assets only, as tasks do.
pub(crate) fn require_asset(store: &mut Store, selector: &AssetSelector) -> Result<Asset> {
    if let Some(asset) = store.find_asset(selector)? {
        return Ok(asset);
    }
    if store.asset_exists_inactive(selector)? {
        bail!(Error::NotFound(format!(
            "{selector} is not active (no asset_active row); inactive assets are reachable by --asset-id only"
        )));
    }
    Err(Error::NotFound(format!("no asset found with {selector}{}", close_uris(store, selector)?)).into())
}

/// Active assets read when a uri matches none, to name a close one: enough for any real
/// deployment, and a bound on what a message may cost.
const CLOSE_URI_SCAN: u64 = 100_000;

/// For a uri that matches no asset, the stored uris of the active assets it probably meant
/// (see [`uri_likeness`]): Airflow stores asset URIs normalised, so `s3://b/orders/` can be
/// stored as `s3://b/orders`.
fn close_uris(store: &mut Store, selector: &AssetSelector) -> Result<String> {
    let AssetSelector::Uri(uri) = selector else { return Ok(String::new()) };
    let wanted = uri_likeness(uri);
    let close: Vec<String> = store
        .active_assets(CLOSE_URI_SCAN)?
        .into_iter()
        .filter(|a| uri_likeness(&a.uri) == wanted)
        .take(3)
        .map(|a| format!("{} ({}, id {})", quote(&a.uri), quote(&a.name), a.id))
        .collect();
    Ok(if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}? Airflow stores asset URIs normalised", close.join(" or "))
    })
}
