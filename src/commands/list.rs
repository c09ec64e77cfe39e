//! `list`: task keys filtered by any part of their scope, or asset keys; ordered by scope,
//! then key. At a terminal a page at a time ([`TERMINAL_PAGE`] rows unless `--limit` says
//! otherwise); anywhere else every row, so that a script that drops stderr, where the note
//! that more rows follow goes, is never handed a cut list. Rows are written as the database
//! hands them over, so a list of any length takes the memory of a few rows; a table, which
//! must hold its rows to size its columns, shows at most [`TABLE_ROWS`].

use std::io::IsTerminal;
use std::ops::ControlFlow;

use super::{asset_selector, check_map_index, has_task_flags, open_keys};
use crate::cli::{GlobalArgs, ListArgs};
use crate::db::Access;
use crate::error::Result;
use crate::model::{Page, external_ref};
use crate::ops::usage;
use crate::output::Format;
use crate::output::{self, Entry, EntryStream, TABLE_ROWS};

pub(crate) fn run(global: &GlobalArgs, args: &ListArgs) -> Result<()> {
    let selector = asset_selector(&args.scope)?;
    let assets = args.assets || selector.is_some();
    if assets && has_task_flags(&args.scope) {
        return usage("list either task keys (--dag-id, …) or asset keys (--asset, --assets, …), not both");
    }
    if assets && args.expired {
        return usage("--expired is for task keys: asset keys never expire");
    }
    args.scope.map_index.map(check_map_index).transpose()?;
    let mut keys = open_keys(global, Access::ReadOnly)?;
    let shown = Shown::new(global.output, args, std::io::stdout().is_terminal());
    // One row more than shown tells whether more follow, without a count query.
    let page = Page { limit: shown.rows.map(|n| n.saturating_add(1)), offset: args.offset };

    if assets {
        let asset = selector.as_ref().map(|selector| keys.asset(selector, false)).transpose()?;
        shown.write(global.output, args, |each| keys.each_asset(asset.as_ref(), args.external, page, each))
    } else {
        let filter = super::task_filter(&args.scope, args.expired, args.external);
        shown.write(global.output, args, |each| keys.each_task(&filter, page, each))
    }
}

/// The rows a list shows at a terminal when `--limit` is not given: a screenful or two that a
/// person reads, with the next `--offset` named after it.
const TERMINAL_PAGE: u64 = 100;

/// How many rows a list shows: `--limit` (0 for all); without it a page at a terminal and
/// every row elsewhere; and in a table at most [`TABLE_ROWS`], which is all a table holds in
/// memory.
struct Shown {
    rows: Option<u64>,
    /// The table's bound cut the list shorter than `--limit` asked.
    capped: bool,
}

impl Shown {
    fn new(format: Format, args: &ListArgs, at_terminal: bool) -> Shown {
        let asked = args.limit.map_or(at_terminal.then_some(TERMINAL_PAGE), |n| (n > 0).then_some(n));
        match format {
            Format::Table if asked.is_none_or(|n| n > TABLE_ROWS) => {
                Shown { rows: Some(TABLE_ROWS), capped: true }
            }
            _ => Shown { rows: asked, capped: false },
        }
    }

    /// Writes the rows `read` hands over as they come, then says whether more follow. With
    /// `--external`, the SQL prefix match is checked exactly here.
    fn write<E: Entry>(
        &self,
        format: Format,
        args: &ListArgs,
        read: impl FnOnce(&mut dyn FnMut(E) -> Result<ControlFlow<()>>) -> Result<()>,
    ) -> Result<()> {
        let mut stream = EntryStream::<E>::stdout(format);
        let (mut seen, mut more) = (0_u64, false);
        read(&mut |entry: E| {
            if self.rows == Some(seen) {
                more = true;
                return Ok(ControlFlow::Break(()));
            }
            seen += 1;
            if !args.external || external_ref(entry.key_value().1).is_some() {
                stream.push(&entry)?;
            }
            Ok(ControlFlow::Continue(()))
        })?;
        stream.finish()?;
        if more {
            let next = args.offset.saturating_add(seen);
            let how = if self.capped {
                format!(
                    "a table shows at most {TABLE_ROWS} rows: -o plain, json or yaml for all, --offset {next} \
                     for the next page"
                )
            } else {
                format!("--offset {next} for the next page, --limit 0 for all")
            };
            output::status(&format!("showing {seen} rows from offset {}; more follow ({how})", args.offset));
        }
        Ok(())
    }
}
