//! The database transport of the per-scope commands: [`Keys`] over the metastore's tables
//! ([`Store`]), written exactly as Airflow writes them. The configuration is read when the
//! transport is made; the database is opened at the first call that needs it, after what can
//! be checked without it (a value's size, the configured retention).

use super::{Context, Doing, mapped_task_hint, require_asset, require_dag_run, require_task_instance};
use crate::archive::Sink;
use crate::db::{Access, AssetWrite, Store, TaskWrite};
use crate::error::{Error, Result};
use crate::json;
use crate::keys::{AssetSet, Each, Expiry, Keys, MissingTaskInstance, TaskSet, require_active};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, Cleared, Page, StoredTime, TaskEntry, TaskFilter,
    TaskScope,
};
use crate::text::quote;
use crate::time::{Retention, Timestamp};
use anyhow::Context as _;

pub(crate) struct Database {
    ctx: Context,
    access: Access,
    store: Option<Store>,
}

impl Database {
    pub(crate) fn new(ctx: Context, access: Access) -> Database {
        Database { ctx, access, store: None }
    }

    fn store(&mut self) -> Result<&mut Store> {
        if self.store.is_none() {
            self.store = Some(self.ctx.open(self.access)?);
        }
        Ok(self.store.as_mut().expect("opened above"))
    }

    /// A value's size as stored, against `[state_store] max_value_storage_bytes`.
    fn check_size(&self, encoded: &str, allow_large: bool) -> Result<()> {
        let limit = &self.ctx.settings.max_value_storage_bytes;
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

    /// The `expires_at` of a write at `now`; `--keep-expiry` keeps the stored one, so the
    /// configured default does not apply.
    fn expires_at(&self, expiry: Expiry, now: Timestamp) -> Result<Option<Timestamp>> {
        let retention = match expiry {
            Expiry::Keep => return Ok(None),
            Expiry::At(at) => return Ok(Some(at)),
            Expiry::Retention(retention) => retention,
            Expiry::Default => {
                let days = &self.ctx.settings.default_retention_days;
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
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => return e,
        };
        if let Err(e) = require_dag_run(store, scope) {
            return e;
        }
        // Without --map-index the scope is the unmapped instance; a mapped task has none.
        let hint = if map_index_given {
            String::new()
        } else {
            match mapped_task_hint(store, scope) {
                Ok(hint) => hint,
                Err(e) => return e,
            }
        };
        Error::NotFound(format!("key {} not found for task {scope}{hint}", quote(key))).into()
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
        let store = self.store()?;
        let asset = &require_asset(store, selector)?;
        require_active(asset)?;
        let now = Timestamp::now();
        let write = AssetWrite { asset_id: asset.id, key: set.key, value: &encoded, updated_at: now };
        if set.must_exist {
            if store.update_asset_value(&write)? == 0 {
                return Err(Error::NotFound(format!(
                    "key {} not found for {}; --keep-expiry changes only an existing key",
                    quote(set.key),
                    super::describe_asset(asset)
                ))
                .into());
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
        Ok(Some(entry)) => {
            store.commit()?;
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
