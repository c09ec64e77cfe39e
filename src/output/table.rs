//! Tables for people, drawn by comfy-table: aligned columns separated by ` | `, a `=` rule under
//! the header, every cell escaped so that a row stays on one line ([`text::cell`]). Columns
//! align by display width, so CJK text and emoji line up too.
//!
//! On a terminal the table fits its width: comfy-table wraps cells rather than print a line
//! wider than the terminal, and a table of [`RECORD_COLUMNS`] or more columns that does not fit
//! is shown one record per row (as `psql`'s expanded display), since eight columns of wrapped
//! slivers read worse than eight lines. Anywhere else (a pipe, a file, the tests) the columns
//! take the width of their longest cell, a layout that does not depend on where it is read.

use std::io::{self, IsTerminal};

use comfy_table::{ColumnConstraint, ContentArrangement, ContentLineStyle, LineStyle, TableStyle, Width};

use crate::redact;
use crate::text;

/// Columns split by `|`, the header ruled by `=`, and no border around.
const STYLE: TableStyle = TableStyle::new()
    .header_lines(ContentLineStyle::none().junction('|'))
    .header_separator(LineStyle::none().fill('=').junction('|'))
    .content_lines(ContentLineStyle::none().junction('|'));

/// A record's lines: the column's name, ` | `, its value; no header rule.
const RECORD_STYLE: TableStyle = TableStyle::new().content_lines(ContentLineStyle::none().junction('|'));

/// A table this wide or wider that does not fit the terminal is shown one record per row.
const RECORD_COLUMNS: usize = 5;

pub(crate) struct Table {
    /// Printed above the table when a report has several.
    pub title: Option<String>,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A line of text where a table would have nothing to show: an empty table's header and
    /// rule read as a fault, not as "nothing".
    pub(crate) fn line(text: impl Into<String>) -> Table {
        Table { title: Some(text.into()), headers: Vec::new(), rows: Vec::new() }
    }

    /// The table's text with its title and every cell masked, before the columns are laid out.
    pub(super) fn masked(&self) -> String {
        let rows = self.rows.iter().map(|row| row.iter().map(|cell| redact::mask(cell)).collect()).collect();
        Table { title: self.title.as_deref().map(redact::mask), headers: self.headers.clone(), rows }.render()
    }

    /// The table's text, its title first, final newline included.
    pub(super) fn render(&self) -> String {
        let width = terminal_width();
        self.layout(width.is_some(), width)
    }

    /// At a terminal, laid out to `width` (or as wide as its cells when none is known).
    fn layout(&self, terminal: bool, width: Option<u16>) -> String {
        if self.headers.is_empty() {
            return self.title.as_ref().map(|title| format!("{title}\n")).unwrap_or_default();
        }
        let table = self.grid(terminal, width);
        // A terminal that reports 0 columns (script(1) without a terminal of its own, some
        // container and CI set-ups) has no width to fit: one character a line is no layout.
        if terminal && table.width() == Some(0) {
            return self.layout(false, None);
        }
        let fits = table.width().is_none_or(|width| self.natural_width() <= usize::from(width));
        if terminal && !fits && self.headers.len() >= RECORD_COLUMNS {
            return self.records(table.width());
        }
        let mut out = self.title.as_ref().map(|title| format!("{title}\n")).unwrap_or_default();
        for line in table.lines() {
            let line = line.trim_end();
            // comfy-table rules the cells' padding too; the rule leaves it blank, as `==== | ====`.
            let rule = line.chars().all(|c| c == '=' || c == '|');
            out.push_str(&if rule { line.replace("=|=", " | ") } else { line.to_string() });
            out.push('\n');
        }
        out
    }

    /// The width of the widest line when no cell wraps: the columns' widest content, their
    /// padding and the separators.
    fn natural_width(&self) -> usize {
        let grid = self.grid(false, None);
        let padding: usize = grid.column_iter().map(|c| usize::from(c.padding_width())).sum();
        let content: usize = grid.column_max_content_widths().into_iter().map(usize::from).sum();
        content + padding + self.headers.len().saturating_sub(1)
    }

    /// One record per row: `-[ n ]` and a line for each column, its name and its value, the
    /// values wrapping to the terminal's width.
    fn records(&self, width: Option<u16>) -> String {
        let mut out = self.title.as_ref().map(|title| format!("{title}\n")).unwrap_or_default();
        for (n, row) in self.rows.iter().enumerate() {
            let fields = Table {
                title: None,
                headers: vec!["", ""],
                rows: self
                    .headers
                    .iter()
                    .zip(row)
                    .map(|(name, cell)| vec![(*name).to_string(), cell.clone()])
                    .collect(),
            };
            let mut grid = fields.grid(true, width);
            grid.load_style(RECORD_STYLE);
            let mark = format!("-[ {} ]", n + 1);
            let rule = usize::from(width.unwrap_or(80)).min(40).max(mark.len());
            out.push_str(&format!("{mark}{}\n", "-".repeat(rule - mark.len())));
            out.extend(grid.lines().skip(1).map(|line| format!("{}\n", line.trim_end())));
        }
        out
    }

    /// The comfy-table of the rows; at a terminal it wraps cells to the width.
    fn grid(&self, terminal: bool, width: Option<u16>) -> comfy_table::Table {
        let mut table = comfy_table::Table::new();
        table.load_style(STYLE).set_header(self.headers.clone());
        for row in &self.rows {
            table.add_row(row.iter().map(|cell| text::cell(cell).into_owned()));
        }
        // A blank on each side of `|`, none at the table's edges.
        let last = self.headers.len().saturating_sub(1);
        let mut names = Vec::new();
        for (column, name) in table.column_iter_mut().zip(&self.headers) {
            let index = column.index;
            column.set_padding((u16::from(index > 0), u16::from(index < last)));
            names.push(u16::try_from(name.len()).unwrap_or(u16::MAX).saturating_add(column.padding_width()));
        }
        if terminal {
            table.set_content_arrangement(ContentArrangement::Dynamic);
            if let Some(width) = width {
                table.set_width(width);
            }
            // Cells wrap to fit the terminal; the column names too, but only when they alone are
            // wider than it.
            let header_width = names.iter().sum::<u16>() + u16::try_from(last).unwrap_or(u16::MAX);
            if table.width().is_some_and(|width| header_width <= width) {
                let bounds =
                    names.into_iter().map(|name| ColumnConstraint::LowerBoundary(Width::Fixed(name)));
                table.set_constraints(bounds);
            }
        }
        table
    }
}

/// The columns of the terminal stdout is, if it is one and says how wide it is.
fn terminal_width() -> Option<u16> {
    let stdout = io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    rustix::termios::tcgetwinsize(&stdout).ok().map(|size| size.ws_col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(headers: Vec<&'static str>, rows: &[&[&str]]) -> Table {
        let rows = rows.iter().map(|row| row.iter().map(|cell| (*cell).to_string()).collect()).collect();
        Table { title: None, headers, rows }
    }

    #[test]
    fn a_terminal_of_no_width_lays_out_as_off_a_terminal() {
        let t = table(vec!["a", "b", "c", "d", "e"], &[&["one", "two", "three", "four", "five"]]);
        assert_eq!(t.layout(true, Some(0)), t.layout(false, None));
    }

    #[test]
    fn table_escapes_control_characters_and_aligns() {
        let t = table(vec!["k", "value"], &[&["a\nb", "1"]]);
        assert_eq!(t.layout(false, None), "k    | value\n==== | =====\na\\nb | 1\n");
    }

    #[test]
    fn columns_align_by_display_width_and_blanks_are_trimmed() {
        let t = table(vec!["key", "value", "by"], &[&["键值", "😀", ""], &["é", "x", "api"]]);
        assert_eq!(
            t.layout(false, None),
            "key  | value | by\n==== | ===== | ===\n键值 | 😀    |\né    | x     | api\n"
        );
        assert_eq!(table(vec!["only"], &[]).layout(false, None), "only\n====\n");
    }

    #[test]
    fn a_line_is_its_text_alone() {
        assert_eq!(Table::line("Nothing to delete.").layout(false, None), "Nothing to delete.\n");
        assert_eq!(Table::line("Nothing to delete.").layout(true, Some(10)), "Nothing to delete.\n");
    }

    #[test]
    fn a_terminal_never_gets_a_line_wider_than_it() {
        let stats =
            ["dag_id", "task_id", "rows", "value_bytes", "expired", "expiring_7d", "never", "oldest_update"];
        let wide = table(
            stats.to_vec(),
            &[&["incremental_orders", "load_new_orders", "4", "52", "2", "0", "0", "x"]],
        );
        for width in [80, 60, 30] {
            let text = wide.layout(true, Some(width));
            assert!(text.lines().all(|line| line.chars().count() <= usize::from(width)), "{width}: {text}");
        }
        // Fewer columns than a record layout takes: the names stay whole and the cells wrap.
        let fits = table(stats[..4].to_vec(), &[&["incremental_orders", "load_new_orders", "4", "52"]]);
        let text = fits.layout(true, Some(40));
        let header: Vec<&str> = text.lines().next().unwrap_or_default().split('|').map(str::trim).collect();
        assert_eq!(header, stats[..4], "{text}");
        assert!(text.lines().all(|line| line.chars().count() <= 40), "{text}");
        // Seven columns that do not fit 70: one record per row, each line a name and its value.
        let wide7 = table(
            stats[..7].to_vec(),
            &[
                &["incremental_orders", "load_new_orders", "4", "52", "2", "0", "0"],
                &["b", "t", "1", "1", "0", "0", "1"],
            ],
        );
        let text = wide7.layout(true, Some(70));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 * 8, "{text}");
        assert!(lines[0].starts_with("-[ 1 ]--") && lines[8].starts_with("-[ 2 ]--"), "{text}");
        assert_eq!(lines[1], "dag_id      | incremental_orders", "{text}");
        assert_eq!(lines[7], "never       | 0", "{text}");
        assert!(lines.iter().all(|line| line.chars().count() <= 70), "{text}");
        // A table that fits stays a table, whatever its columns.
        assert!(wide7.layout(true, Some(200)).starts_with("dag_id "), "fits 200 columns");
        let long = "word ".repeat(40);
        let mut t = table(vec!["check", "status", "message"], &[&["json_values", "problem", &long]]);
        t.title = Some("Checks:".to_string());
        let text = t.layout(true, Some(40));
        assert!(text.starts_with("Checks:\ncheck"), "{text}");
        assert!(text.lines().count() > 4, "the message wraps: {text}");
        assert!(text.lines().all(|line| line.chars().count() <= 40), "{text}");
        assert!(text.lines().nth(2).is_some_and(|rule| rule.starts_with("=========== | ")), "{text}");
    }
}
