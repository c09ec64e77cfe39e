//! The REST transport: the per-scope commands (get, set, delete, clear, list) over Airflow
//! 3.3's public REST API v2, for deployments whose metastore is out of reach (docs/rest.md).
//!
//! [`Api`] is to this transport what [`crate::db::Store`] is to the database: the state
//! store's reads and writes, in the model's nouns ([`TaskEntry`], [`AssetEntry`], [`Asset`]),
//! so that a command renders the same documents whichever transport it used. [`Remote`]
//! (`keys.rs`) puts it behind the commands' interface, [`crate::keys::Keys`], and refuses
//! what the API cannot do before anything is sent.
//!
//! Opening an `Api` checks the server once (`GET /api/v2/version`, no token: an HTML page
//! there means the URL is not Airflow's API, a version before 3.3 has no state store) and then
//! gets the token ([`auth`]).

mod auth;
mod http;
mod keys;
mod url;

use std::collections::{BTreeSet, HashSet};
use std::hash::{BuildHasher as _, RandomState};
use std::ops::ControlFlow;

use ureq::http::Method;

pub(crate) use self::auth::Credentials;
pub(crate) use self::http::Settings;
use self::http::{Answer, Crowded, Http, detail, status_error};
pub(crate) use self::keys::Remote;
pub(crate) use self::url::BaseUrl;
use self::url::{Subject, Target};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use crate::model::{Asset, AssetEntry, AssetSelector, StoredTime, TaskEntry, TaskScope};
use crate::output;
use crate::text::quote;
use crate::time::Timestamp;
use anyhow::bail;

/// The page size asked for: Airflow cuts any larger `limit` to `[api] maximum_page_limit`,
/// 100 by default, and says nothing.
const PAGE: u64 = 100;

/// The most entries read from one collection (a task instance's or an asset's keys, a task's
/// mapped instances, the assets a name filter matches), so that a server whose
/// `total_entries` lies cannot keep a command paging forever; beyond it the database
/// transport reads any number.
pub(crate) const MAX_ENTRIES: u64 = 1_000_000;

/// The first Airflow with the state-store API.
const FIRST_VERSION: (u64, u64) = (3, 3);

/// What the user gave to reach the API.
pub(crate) struct Options {
    pub base: BaseUrl,
    pub credentials: Credentials,
    pub settings: Settings,
}

/// The open transport: a checked server and a token.
pub(crate) struct Api {
    http: Http,
    /// A request with the token got an answer other than 401 or 403: the token is good, and
    /// a 403 after it is about the user's permissions.
    accepted: std::cell::Cell<bool>,
}

impl Api {
    /// Checks the server's version, then gets the token.
    pub(crate) fn open(options: Options) -> Result<Api> {
        let verbose = options.settings.verbose;
        options.credentials.register();
        let mut http = Http::new(options.base, options.settings)?;
        let version = check_version(&http)?;
        if verbose {
            output::note(&format!(
                "api: Airflow {} at {}; {}",
                http::from_server(&version, 100),
                http.base().as_str(),
                options.credentials.describe()
            ));
        }
        if let Some(token) = options.credentials.token(&http)? {
            http.set_bearer(token);
        }
        Ok(Api { http, accepted: std::cell::Cell::new(false) })
    }

    /// Sends a request and reads its answer; a status outside `expected` is an error of its
    /// kind (see [`status_error`]) with the server's reason.
    fn call(
        &self,
        method: Method,
        target: &Target,
        body: Option<&Value>,
        expected: &[u16],
    ) -> Result<Answer> {
        let answer = self.http.send(method.clone(), target, body, true)?;
        if !matches!(answer.status, 401 | 403) {
            self.accepted.set(true);
        }
        if expected.contains(&answer.status) {
            return Ok(answer);
        }
        Err(self.refused(&method, target, &answer))
    }

    /// The error of an answer that is not the one expected.
    fn refused(&self, method: &Method, target: &Target, answer: &Answer) -> anyhow::Error {
        let shown = self.http.base().join(target);
        let said = detail(answer);
        let colon = if said.is_empty() { "" } else { ": " };
        let mut message =
            format!("{method} {shown} answered {}{colon}{said}{}", answer.status, retried(method, answer));
        if answer.status == 401 && !self.http.has_token() {
            message.push_str(
                " (no token was given: set AIRFLOW_CLI_TOKEN, --api-token-cmd, or --api-username with STATE_STORE_API_PASSWORD)",
            );
        }
        // Airflow says "Forbidden" when the token is good and its user lacks the permission (a
        // bad token is "Invalid JWT token", an expired one a 401); a token the server accepted
        // for an earlier request is good too.
        if answer.status == 403 && self.http.has_token() && (said == "Forbidden" || self.accepted.get()) {
            message.push_str(&lacking_permission(method, target.subject()));
        }
        status_error(answer.status, &message)
    }

    // ── task keys ────────────────────────────────────────────────────────────────────────

    /// `/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/` and `tail`.
    fn task_instance_target(scope: &TaskScope, tail: &[&str]) -> Target {
        let instance: [&str; 6] =
            ["dags", &scope.dag_id, "dagRuns", &scope.run_id, "taskInstances", &scope.task_id];
        Target::api(&[&instance[..], tail].concat())
    }

    fn task_target(scope: &TaskScope, key: Option<&str>) -> Target {
        let tail = [["state-store"].as_slice(), key.as_slice()].concat();
        Self::task_instance_target(scope, &tail).query("map_index", scope.map_index)
    }

    /// One task key, expired or not; `None` when the API has no such key (it says so alike
    /// for a key, a task instance or a dag run that does not exist).
    pub(crate) fn task_entry(&self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        self.found(&Self::task_target(scope, Some(key)), |item| task_entry(scope, item))
    }

    /// `PUT`, an upsert with the `expires_at` given (`"default"`, the server's
    /// `[state_store] default_retention_days`; null, never; or a time); without one, `PATCH`:
    /// the value of an existing key, its expiry kept.
    pub(crate) fn set_task(
        &self,
        scope: &TaskScope,
        key: &str,
        value: &Value,
        expires_at: Option<Value>,
    ) -> Result<()> {
        let method = if expires_at.is_some() { Method::PUT } else { Method::PATCH };
        self.write(method, &Self::task_target(scope, Some(key)), Some(value_body(value, expires_at)))
    }

    pub(crate) fn delete_task(&self, scope: &TaskScope, key: &str) -> Result<()> {
        self.write(Method::DELETE, &Self::task_target(scope, Some(key)), None)
    }

    /// A `GET` of one item, its body read by `read`: `None` for a 404.
    fn found<T>(&self, target: &Target, read: impl FnOnce(&Value) -> Result<T>) -> Result<Option<T>> {
        let answer = self.call(Method::GET, target, None, &[200, 404])?;
        (answer.status != 404).then(|| read(body(&answer)?)).transpose()
    }

    /// A write, answered 200 or 204 (a `PUT` also 201).
    fn write(&self, method: Method, target: &Target, body: Option<Value>) -> Result<()> {
        let expected: &[u16] = if method == Method::PUT { &[200, 201, 204] } else { &[200, 204] };
        self.call(method, target, body.as_ref(), expected).map(drop)
    }

    /// The map indexes a task has in its dag run (see [`MapIndexes`]), from `listMapped`.
    pub(crate) fn map_indexes(&self, scope: &TaskScope) -> Result<MapIndexes> {
        let mut indexes = BTreeSet::from([-1]);
        let target = Self::task_instance_target(scope, &["listMapped"]);
        let walked = self.walk(&target, "task_instances", 0, true, &mut |ti| {
            indexes.extend(ti.get("map_index").and_then(Value::as_i64).filter(|i| *i >= 0));
            Ok(ControlFlow::Continue(()))
        })?;
        let (whole, mapped) = match walked {
            Walked::Flow(_) => (true, true),
            Walked::NotFound(answer) => (detail(&answer).contains("is not mapped"), false),
        };
        Ok(MapIndexes { indexes: indexes.into_iter().collect(), whole, mapped })
    }

    /// That the task instance exists, asked without changing anything: a 404 is the API's own
    /// words on what is missing.
    pub(crate) fn require_task_instance(&self, scope: &TaskScope) -> Result<()> {
        let target = Self::task_instance_target(scope, &[&scope.map_index.to_string()]);
        self.call(Method::GET, &target, None, &[200]).map(drop)
    }

    /// Hands over the keys of one task instance from `offset`, a page at a time, in the API's
    /// order (by key), each key once however the pages shift under concurrent writes.
    pub(crate) fn each_task(
        &self,
        scope: &TaskScope,
        offset: u64,
        each: &mut dyn FnMut(TaskEntry) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        self.pages(&Self::task_target(scope, None), "task_state_store", offset, &mut |item| {
            each(task_entry(scope, item)?)
        })
    }

    // ── assets ───────────────────────────────────────────────────────────────────────────

    fn asset_target(id: i64, key: Option<&str>) -> Target {
        Target::api(&[["assets", &id.to_string(), "state-store"].as_slice(), key.as_slice()].concat())
    }

    /// Resolves a selector as the database path does: an id reaches any asset, a name or a
    /// URI an active one. The API's name and URI filters match prefixes, so the match is made
    /// exact here. An asset found by id says `active: false` whatever it is: only a write
    /// needs to know ([`Api::asset_to_write`]).
    pub(crate) fn asset(&self, selector: &AssetSelector) -> Result<Asset> {
        let found = match selector {
            AssetSelector::Id(id) => self.found(&Target::api(&["assets", &id.to_string()]), asset)?,
            AssetSelector::Name(name) => {
                self.asset_by("name_prefix_pattern", name, selector, |a| &a.name == name)?
            }
            AssetSelector::Uri(uri) => {
                self.asset_by("uri_prefix_pattern", uri, selector, |a| &a.uri == uri)?
            }
        };
        found.ok_or_else(|| Error::NotFound(format!("no asset found with {selector}")).into())
    }

    /// [`Api::asset`], with whether an asset found by id is active: the API has no such field,
    /// so the active assets of its name are searched for its id.
    pub(crate) fn asset_to_write(&self, selector: &AssetSelector) -> Result<Asset> {
        let mut found = self.asset(selector)?;
        if let AssetSelector::Id(_) = selector {
            let id = found.id;
            found.active =
                self.find_asset("name_prefix_pattern", &found.name, true, |a| a.id == id)?.is_some();
        }
        Ok(found)
    }

    /// The active asset the prefix filter finds that `matches`; `None` when there is none,
    /// active or not.
    fn asset_by(
        &self,
        filter: &'static str,
        text: &str,
        selector: &AssetSelector,
        matches: impl Fn(&Asset) -> bool,
    ) -> Result<Option<Asset>> {
        if let Some(found) = self.find_asset(filter, text, true, &matches)? {
            return Ok(Some(Asset { active: true, ..found }));
        }
        if self.find_asset(filter, text, false, &matches)?.is_some() {
            bail!(Error::NotFound(format!(
                "{selector} is not active; inactive assets are reachable by --asset-id only"
            )));
        }
        Ok(None)
    }

    /// The first asset the prefix filter returns that `matches`, paging through the rest.
    fn find_asset(
        &self,
        filter: &'static str,
        text: &str,
        only_active: bool,
        matches: impl Fn(&Asset) -> bool,
    ) -> Result<Option<Asset>> {
        let target = Target::api(&["assets"]).query(filter, text).query("only_active", only_active);
        let mut found = None;
        let _: ControlFlow<()> = self.pages(&target, "assets", 0, &mut |item| {
            found = Some(asset(item)?).filter(|candidate| matches(candidate));
            Ok(if found.is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })?;
        Ok(found)
    }

    pub(crate) fn asset_entry(&self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        self.found(&Self::asset_target(asset.id, Some(key)), |item| asset_entry(asset, item))
    }

    pub(crate) fn put_asset(&self, asset: &Asset, key: &str, value: &Value) -> Result<()> {
        self.write(Method::PUT, &Self::asset_target(asset.id, Some(key)), Some(value_body(value, None)))
    }

    pub(crate) fn delete_asset(&self, asset: &Asset, key: &str) -> Result<()> {
        self.write(Method::DELETE, &Self::asset_target(asset.id, Some(key)), None)
    }

    pub(crate) fn each_asset(
        &self,
        asset: &Asset,
        offset: u64,
        each: &mut dyn FnMut(AssetEntry) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        self.pages(&Self::asset_target(asset.id, None), "asset_state_store", offset, &mut |item| {
            each(asset_entry(asset, item)?)
        })
    }

    /// Walks a collection a page at a time from `offset` (see [`Api::walk`]).
    fn pages(
        &self,
        target: &Target,
        field: &str,
        offset: u64,
        each: &mut dyn FnMut(&Value) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        match self.walk(target, field, offset, false, each)? {
            Walked::Flow(flow) => Ok(flow),
            Walked::NotFound(_) => Err(Error::Remote("the API answered 404".to_string()).into()),
        }
    }

    /// Walks the collection at `target` a page at a time from `start`, with `limit` [`PAGE`]
    /// (or a tenth of it, for a page that holds too much to read); with `may_be_missing`, a 404
    /// ends the walk and is handed back. Items with a key already handed over are skipped; only a
    /// digest of each key is remembered, so memory grows by 16 bytes a key, not with their
    /// values.
    ///
    /// Airflow pages by offset over `ORDER BY key`: a key deleted before the offset moves the
    /// next key onto the page already read. So each page after the first is asked for from a
    /// little before the end of the last (`overlap` entries), and must hold one of that
    /// page's keys (an anchor): then everything between them has been read. A page that holds
    /// none was shifted further back (or its anchors were deleted): the walk steps back,
    /// twice as far each time, and from the start when that is nearer; past
    /// [`MAX_RESTARTS`] walks from the start, or [`MAX_MISSES`] steps back, it stops and says
    /// the listing may be incomplete (exit 4). A key that exists for the whole walk is never
    /// missed in silence. With pages of one entry no page can overlap the last: a
    /// `total_entries` lower than the last page's then sends the walk back to the start.
    ///
    /// The walk ends at a page, read where the last one ends, that is shorter than the
    /// server's page size (or empty), whatever `total_entries` says: a total that lags the
    /// keys does not end a walk whose pages are full. The total only says, on the first page,
    /// whether a page shorter than asked for is the server's page size or the last page.
    ///
    /// A server cannot keep it going: the pages it may take are set by the answers (see
    /// [`Pages`]) and never exceed [`MAX_PAGES`] a pass, a page that holds nothing new ends it
    /// (exit 4), and so does a collection said or found to hold more than [`MAX_ENTRIES`].
    fn walk(
        &self,
        target: &Target,
        field: &str,
        start: u64,
        may_be_missing: bool,
        each: &mut dyn FnMut(&Value) -> Result<ControlFlow<()>>,
    ) -> Result<Walked> {
        let expected: &[u16] = if may_be_missing { &[200, 404] } else { &[200] };
        // The keys handed over, as 128-bit digests under keys drawn for this run, so that no
        // server can choose keys that collide.
        let mut seen: HashSet<(u64, u64)> = HashSet::new();
        let hashers = (RandomState::new(), RandomState::new());
        let digest = |key: String| (hashers.0.hash_one(&key), hashers.1.hash_one(&key));
        let mut limit = PAGE;
        let mut pages: Option<Pages> = None;
        // The pages of this pass that carried the walk on (a step back is not one of them).
        let mut answered = 0;
        // Every key up to `next` (a position in the server's order as of the page that ended
        // there) has been handed over; `anchors` are that page's keys, none at the start.
        let mut next = start;
        let mut anchors: Vec<(u64, u64)> = Vec::new();
        let mut overlap: u64 = 1;
        let mut last_total: Option<u64> = None;
        let (mut restarts, mut misses) = (0, 0);
        loop {
            let at = if anchors.is_empty() { start } else { next.saturating_sub(overlap).max(start) };
            let page_target = target.clone().query("limit", limit).query("offset", at);
            let answer = match self.call(Method::GET, &page_target, None, expected) {
                // Values so many that the page is asked for again in tenths (a GET changes
                // nothing), down to one entry.
                Err(e) if limit > 1 && e.downcast_ref::<Crowded>().is_some() => {
                    limit /= 10;
                    overlap = overlap.min(limit / 2);
                    if let Some(pages) = &mut pages {
                        pages.shrink(limit, at, answered);
                        if pages.needed > MAX_PAGES {
                            return Err(too_many_pages(&self.http.base().join(&page_target), pages));
                        }
                    }
                    continue;
                }
                other => other?,
            };
            if answer.status == 404 {
                return Ok(Walked::NotFound(answer));
            }
            let total = body(&answer)?.get("total_entries").and_then(Value::as_u64);
            let total =
                total.ok_or_else(|| Error::Remote("the API's answer has no total_entries".to_string()))?;
            let shown = || self.http.base().join(&page_target);
            if total > MAX_ENTRIES || seen.len() as u64 >= MAX_ENTRIES {
                bail!(Error::Remote(format!(
                    "GET {} says the collection holds {total} entries; the REST transport reads at most \
                     {MAX_ENTRIES} (the database transport has no such limit)",
                    shown()
                )));
            }
            let page = body(&answer)?.get(field).and_then(Value::as_array);
            let page =
                page.ok_or_else(|| Error::Remote(format!("the API's answer has no list {}", quote(field))))?;
            let digests: Vec<(u64, u64)> = page.iter().map(|item| digest(item_key(item))).collect();
            let shrunk = last_total.is_some_and(|before| total < before);
            last_total = Some(total);
            let anchored = at == start
                || if overlap == 0 { !shrunk } else { digests.iter().any(|d| anchors.contains(d)) };
            answered += u64::from(anchored);
            if let Some(Pages { total: said, from, size, allowed, .. }) = &pages
                && answered > *allowed
            {
                bail!(Error::Remote(format!(
                    "the API keeps sending pages: GET {} is page {answered} of a collection its first page \
                     said holds {said} entries from offset {from} in pages of {size}, which take at most \
                     {allowed} pages with room for keys written meanwhile; stopped",
                    shown()
                )));
            }
            if !anchored {
                // Keys before the page were deleted and the rest moved back past the overlap,
                // or every key of the last page is gone: the page is left unread (a page
                // further back holds its keys again) and the walk steps back, or starts again.
                misses += 1;
                overlap = overlap.saturating_mul(2);
                if overlap == 0 || next.saturating_sub(overlap) <= start {
                    restarts += 1;
                    answered = 0;
                    anchors.clear();
                }
                if restarts > MAX_RESTARTS || misses > MAX_MISSES {
                    return Err(incomplete(&shown(), restarts, misses));
                }
                continue;
            }
            let mut new = 0;
            // Each key once: a key handed over already is skipped.
            for (item, _) in page.iter().zip(&digests).filter(|(_, digest)| seen.insert(**digest)) {
                new += 1;
                if each(item)?.is_break() {
                    return Ok(Walked::Flow(ControlFlow::Break(())));
                }
            }
            let length = page.len() as u64;
            if length > 0 && new == 0 && length >= pages.as_ref().map_or(limit, |p| p.size.min(limit)) {
                bail!(Error::Remote(format!(
                    "the API repeats itself: GET {} answered only entries it had sent already; stopped",
                    shown()
                )));
            }
            let end = at + length;
            let full = match &pages {
                Some(known) => length >= known.size.min(limit),
                // The first page: one shorter than asked for is the server's page size when
                // the total says more follow, and the last page when the total says it is;
                // a total below what the page holds is stale, so the next page tells.
                None => length > 0 && (length >= limit || end != total),
            };
            if !full {
                return Ok(Walked::Flow(ControlFlow::Continue(())));
            }
            match &mut pages {
                // A full page that reaches the total its own answer gives: the total lags the
                // keys, and the walk goes on a page at a time.
                Some(known) if end >= total => {
                    known.total = known.total.max(end + known.size);
                    known.recount(end, answered, known.size - overlap.min(known.size - 1));
                }
                Some(_) => {}
                None => {
                    let first = Pages::first(at, length, total.max(end));
                    if first.needed > MAX_PAGES {
                        return Err(too_many_pages(&shown(), &first));
                    }
                    pages = Some(first);
                }
            }
            let size = pages.as_ref().map_or(length, |p| p.size);
            // An overlap leaves at least half of each page new; with pages of one there is none.
            let widest = size / 2;
            let wanted = overlap.clamp(1, widest.max(1)).min(widest);
            if let Some(known) = &mut pages
                && wanted > 0
            {
                known.recount(end, answered, size - wanted);
            }
            overlap = wanted;
            next = end;
            anchors = digests;
        }
    }
}

/// The most times a walk starts again from its first offset, and steps back, before it says
/// that its listing may be incomplete: a collection that keeps changing faster than a walk
/// can follow it.
const MAX_RESTARTS: u32 = 3;
const MAX_MISSES: u32 = 64;

/// The key of a page's entry, or the id of an asset or a task instance.
fn item_key(item: &Value) -> String {
    item.get("key").or_else(|| item.get("id")).map(json::dumps).unwrap_or_default()
}

/// The error of a walk that could not keep up with the writes to its collection.
fn incomplete(shown: &str, restarts: u32, misses: u32) -> anyhow::Error {
    Error::Remote(format!(
        "the listing may be incomplete: keys were deleted before the offset of GET {shown} faster than \
         the walk could follow them ({misses} pages missed the last keys read, {restarts} walks from \
         the start); stopped"
    ))
    .into()
}

/// The error of a collection whose pages are too many to read.
fn too_many_pages(shown: &str, pages: &Pages) -> anyhow::Error {
    Error::Remote(format!(
        "GET {shown} says the collection holds {} entries and sends them in pages of {}: reading them from \
         offset {} would take {} requests, more than the {MAX_PAGES} the REST transport makes for one \
         collection (the database transport has no such limit)",
        pages.total, pages.size, pages.from, pages.needed
    ))
    .into()
}

/// The most pages one walk reads: a collection of [`MAX_ENTRIES`] in Airflow's pages of
/// [`PAGE`]. A server that pages fewer entries at a time is read to fewer entries.
const MAX_PAGES: u64 = MAX_ENTRIES / PAGE;

/// How many pages a walk may read, set by its first page that is not its last: its size is
/// the server's page size (Airflow cuts a larger `limit` to `[api] maximum_page_limit`
/// without a word), and its `total_entries` the collection's size. Reading the rest takes
/// `needed` = ⌈(total − offset) / size⌉ pages; `allowed` adds a tenth of them, at least one,
/// for keys written during the walk (each key written before the offset shifts one entry
/// into the next page, where it is skipped). A server that sends pages past it is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pages {
    /// The offset the walk started at, and the total its first page gave.
    from: u64,
    total: u64,
    /// The entries a full page holds.
    size: u64,
    needed: u64,
    allowed: u64,
}

impl Pages {
    fn first(from: u64, size: u64, total: u64) -> Pages {
        let needed = total.saturating_sub(from).div_ceil(size.max(1));
        Pages { from, total, size, needed, allowed: needed + needed.div_ceil(10) }
    }

    /// The page size fell to `limit` (a page held too much to read) after `answered` pages,
    /// with the walk at `offset`: the pages left to the first page's total are counted again
    /// at the new size.
    fn shrink(&mut self, limit: u64, offset: u64, answered: u64) {
        if limit >= self.size {
            return;
        }
        self.size = limit;
        let left = self.total.saturating_sub(offset).div_ceil(limit.max(1));
        self.needed = answered + left;
        self.allowed = answered + left + left.div_ceil(10);
    }

    /// The pages left from `position` to the total, at `progress` new entries a page (a
    /// page overlaps the last), counted again after `answered` pages: the bound only grows.
    fn recount(&mut self, position: u64, answered: u64, progress: u64) {
        let left = self.total.saturating_sub(position).div_ceil(progress.max(1));
        self.needed = self.needed.max(answered + left);
        self.allowed = self.allowed.max(answered + left + left.div_ceil(10)).min(MAX_PAGES + MAX_PAGES / 10);
    }
}

/// The map indexes of a task in its dag run, ascending, starting with -1 (an unmapped
/// instance, or keys written there anyway).
#[derive(Debug, Clone)]
pub(crate) struct MapIndexes {
    pub indexes: Vec<i64>,
    /// Whether the list is whole: `listMapped` answered, or said the task is not mapped; not
    /// when the server could not tell (a dag it has not parsed).
    pub whole: bool,
    /// `listMapped` answered: the task is mapped, so no task instance has map index -1.
    pub mapped: bool,
}

/// How a walk over a collection ended.
enum Walked {
    Flow(ControlFlow<()>),
    /// The collection is not there (a 404, when it may be missing).
    NotFound(Answer),
}

/// `GET /api/v2/version`, without a token: the server is Airflow's API, 3.3 or later.
fn check_version(http: &Http) -> Result<String> {
    let target = Target::api(&["version"]);
    let base = http.base();
    let shown = base.join(&target);
    let answer = http.send(Method::GET, &target, None, false)?;
    if answer.status != 200 {
        let hint = match answer.status {
            404 if base.has_path() => format!("; not Airflow 3's API: {}", base.prefix_advice()),
            404 => {
                "; not Airflow 3's API: check --api-url (a path prefix, such as Astronomer's, belongs in it)"
                    .to_string()
            }
            _ => String::new(),
        };
        let message = format!(
            "GET {shown} answered {}: {}{}{hint}",
            answer.status,
            detail(&answer),
            retried(&Method::GET, &answer)
        );
        bail!(match answer.status {
            401 | 403 => Error::Auth(message),
            _ => Error::Remote(message),
        });
    }
    let version = answer.json.as_ref().and_then(|j| j.get("version")?.as_str()).map(str::to_string);
    let version = version
        .ok_or_else(|| Error::Remote(format!("GET {shown} answered without a version: not Airflow's API")))?;
    match major_minor(&version) {
        Some(found) if found >= FIRST_VERSION => Ok(version),
        Some(_) => bail!(Error::Schema(format!(
            "{} runs Airflow {version}, which has no state store: it came with Airflow 3.3",
            base.as_str()
        ))),
        None => bail!(Error::Remote(format!(
            "GET {shown} answered the version {}, which is not Airflow's",
            quote(&version)
        ))),
    }
}

/// What a 403 to a token the server accepts means: its user lacks the permission Airflow checks
/// for this request, on the dag's task instances for a task key (`requires_access_dag`,
/// `TASK_INSTANCE`) or on assets for an asset key (`requires_access_asset`). A Viewer may read
/// both and change neither.
fn lacking_permission(method: &Method, subject: &Subject) -> String {
    let (verb, permission) = match *method {
        Method::GET => ("read", "read"),
        Method::DELETE => ("delete", "delete"),
        _ => ("change", "edit"),
    };
    let viewer = if *method == Method::GET { "" } else { "; a Viewer may only read" };
    let (state, whose) = match subject {
        Subject::Dag(dag_id) => (format!("dag {}", quote(dag_id)), "the dag's task instances"),
        Subject::Assets => ("assets".to_string(), "assets"),
        Subject::Other => {
            return "; the token was accepted, but its user lacks the permission for this request"
                .to_string();
        }
    };
    format!(
        "; the token was accepted, but its user may not {verb} the state of {state}: that takes Airflow's \
         permission to {permission} {whose}{viewer}"
    )
}

/// What a refused answer's message says of the request's tries: how many times it was sent,
/// and for a write answered 502, 503 or 504 whether it may have been carried out. A write is
/// sent again only after a 503 with `Retry-After` (the server saying it did nothing), so
/// every earlier answer of a write sent more than once was one.
fn retried(method: &Method, answer: &Answer) -> String {
    let write = *method != Method::GET;
    let mut said = String::new();
    if answer.sent > 1 {
        said.push_str(&format!("; sent {} times", answer.sent));
        if write {
            let which = if answer.did_nothing { "each" } else { "the earlier tries" };
            said.push_str(&format!(", {which} answered 503 with Retry-After (the server did nothing)"));
        }
    }
    if write && matches!(answer.status, 502..=504) {
        if answer.did_nothing {
            if answer.sent == 1 {
                said.push_str("; a 503 with Retry-After: the server did nothing");
            }
            said.push_str("; not sent again");
        } else {
            said.push_str(
                "; a gateway's answer: the request may have been carried out, so it was not sent again (check before retrying)",
            );
        }
    }
    said
}

/// A write's body: `{"value": …}`, and a task key's PUT its expiry.
fn value_body(value: &Value, expires_at: Option<Value>) -> Value {
    let fields = [("value", Some(value.clone())), ("expires_at", expires_at)];
    Value::Object(fields.into_iter().filter_map(|(name, field)| Some((name.to_string(), field?))).collect())
}

/// `3.3.2`, `3.3.0rc1`, `3.4.0.dev0` → (3, 3), (3, 3), (3, 4).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
    Some((major, minor.parse().ok()?))
}

/// The answer's JSON, which a 200 must have.
fn body(answer: &Answer) -> Result<&Value> {
    answer
        .json
        .as_ref()
        .ok_or_else(|| Error::Remote(format!("the API answered {} with no body", answer.status)).into())
}

fn malformed(what: &str) -> anyhow::Error {
    Error::Remote(format!("the API's answer is not a state-store entry: {what}")).into()
}

fn text_field(item: &Value, name: &str) -> Result<String> {
    item.get(name).and_then(Value::as_str).map(str::to_string).ok_or_else(|| malformed(&format!("no {name}")))
}

/// A timestamp as the API writes it (RFC 3339, `Z`); kept as text if it is not one.
fn time_field(item: &Value, name: &str) -> Result<Option<StoredTime>> {
    match item.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(
            Timestamp::parse_rfc3339(text)
                .map_or_else(|_| StoredTime::Unreadable(text.clone()), StoredTime::At),
        )),
        Some(_) => Err(malformed(&format!("{name} is not a timestamp"))),
    }
}

/// The value as the database stores it: Python's `json.dumps` of what the API returns,
/// which is `json.loads` of the stored text.
fn stored_text(item: &Value) -> Result<String> {
    item.get("value").map(json::dumps).ok_or_else(|| malformed("no value"))
}

fn task_entry(scope: &TaskScope, item: &Value) -> Result<TaskEntry> {
    Ok(TaskEntry {
        scope: scope.clone(),
        key: text_field(item, "key")?,
        value: stored_text(item)?,
        updated_at: time_field(item, "updated_at")?.ok_or_else(|| malformed("no updated_at"))?,
        expires_at: time_field(item, "expires_at")?,
    })
}

fn asset_entry(asset: &Asset, item: &Value) -> Result<AssetEntry> {
    let writer = item.get("last_updated_by").filter(|w| !w.is_null());
    let writer_text =
        |name: &str| writer.and_then(|w| w.get(name)).and_then(Value::as_str).map(str::to_string);
    Ok(AssetEntry {
        asset_id: asset.id,
        asset_name: Some(asset.name.clone()),
        asset_uri: Some(asset.uri.clone()),
        key: text_field(item, "key")?,
        value: stored_text(item)?,
        updated_at: time_field(item, "updated_at")?.ok_or_else(|| malformed("no updated_at"))?,
        last_updated_by_kind: writer_text("kind"),
        last_updated_by_dag_id: writer_text("dag_id"),
        last_updated_by_run_id: writer_text("run_id"),
        last_updated_by_task_id: writer_text("task_id"),
        last_updated_by_map_index: writer.and_then(|w| w.get("map_index")).and_then(Value::as_i64),
    })
}

fn asset(item: &Value) -> Result<Asset> {
    Ok(Asset {
        id: item.get("id").and_then(Value::as_i64).ok_or_else(|| malformed("an asset without an id"))?,
        name: text_field(item, "name")?,
        uri: text_field(item, "uri")?,
        active: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compared_by_major_and_minor() {
        assert_eq!(major_minor("3.3.2"), Some((3, 3)));
        assert_eq!(major_minor("3.3.0rc1"), Some((3, 3)));
        assert_eq!(major_minor("3.10.0.dev0"), Some((3, 10)));
        assert_eq!(major_minor("2.10.5"), Some((2, 10)));
        assert!(major_minor("2.10.5").unwrap() < FIRST_VERSION);
        assert!(major_minor("3.10.0").unwrap() >= FIRST_VERSION);
        assert_eq!(major_minor("main"), None);
    }

    /// The pages a walk may read follow from its first page: a tenth more, at least one, for
    /// keys written meanwhile; counted again when the page size falls.
    #[test]
    fn the_pages_of_a_walk_are_bounded_by_its_first_page() {
        let pages = Pages::first(0, 100, 250);
        assert_eq!((pages.needed, pages.allowed), (3, 4));
        let pages = Pages::first(0, 100, MAX_ENTRIES);
        assert_eq!((pages.needed, pages.allowed), (MAX_PAGES, 11_000));
        assert_eq!(Pages::first(0, 1, MAX_ENTRIES).needed, MAX_ENTRIES);
        assert_eq!(Pages::first(120, 30, 95).needed, 0);
        let mut pages = Pages::first(0, 100, 1_000);
        pages.shrink(10, 300, 3);
        assert_eq!((pages.size, pages.needed, pages.allowed), (10, 73, 80));
        let before = pages.clone();
        pages.shrink(100, 300, 3);
        assert_eq!(pages, before, "a larger limit changes nothing");
    }

    #[test]
    fn entries_read_as_the_database_path_reads_rows() {
        let scope = TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: 2 };
        let item = json::parse(
            r#"{"key":"k","value":{"é":1e16,"f":1.0,"big":100000000000000000000},"updated_at":"2026-12-03T10:00:00.5Z","expires_at":null}"#,
        )
        .unwrap();
        let entry = task_entry(&scope, &item).unwrap();
        assert_eq!(entry.value, r#"{"\u00e9": 1e+16, "f": 1.0, "big": 100000000000000000000}"#);
        assert_eq!(
            entry.updated_at.display(),
            Timestamp::parse_rfc3339("2026-12-03T10:00:00.500000+00:00").unwrap().to_rfc3339()
        );
        assert_eq!(entry.expires_at, None);
        let asset = Asset { id: 7, name: "n".into(), uri: "u".into(), active: true };
        let item = json::parse(
            r#"{"key":"k","value":"v","updated_at":"2026-12-03T10:00:00Z","last_updated_by":{"kind":"task","dag_id":"d","run_id":"r","task_id":"t","map_index":-1}}"#,
        )
        .unwrap();
        let entry = asset_entry(&asset, &item).unwrap();
        assert_eq!(
            (entry.last_updated_by_kind.as_deref(), entry.last_updated_by_map_index),
            (Some("task"), Some(-1))
        );
        assert!(task_entry(&scope, &json::parse(r#"{"key":"k"}"#).unwrap()).is_err());
    }
}
