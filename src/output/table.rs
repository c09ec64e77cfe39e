//! Tables for people: aligned columns separated by ` | `, a `=` rule under the header, every
//! cell escaped so that a row stays on one line ([`text::cell`]).

use crate::redact;
use crate::text;

pub(crate) struct Table {
    /// Printed above the table when a report has several.
    pub title: Option<String>,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The same table with its title and every cell masked.
    pub(super) fn masked(&self) -> Table {
        Table {
            title: self.title.as_deref().map(redact::mask),
            headers: self.headers.clone(),
            rows: self.rows.iter().map(|row| row.iter().map(|cell| redact::mask(cell)).collect()).collect(),
        }
    }

    /// The table's text, its title first, final newline included.
    pub(super) fn render(&self) -> String {
        let rows: Vec<Vec<String>> =
            self.rows.iter().map(|r| r.iter().map(|c| text::cell(c).into_owned()).collect()).collect();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
            let mut s = String::new();
            for (i, cell) in cells.enumerate() {
                if i > 0 {
                    s.push_str(" | ");
                }
                s.push_str(cell);
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                s.extend(std::iter::repeat_n(' ', pad));
            }
            format!("{}\n", s.trim_end())
        };
        let mut out = self.title.as_ref().map(|title| format!("{title}\n")).unwrap_or_default();
        out.push_str(&line(&mut self.headers.iter().copied()));
        let rule: Vec<String> = widths.iter().map(|w| "=".repeat(*w)).collect();
        out.push_str(&line(&mut rule.iter().map(String::as_str)));
        for row in &rows {
            out.push_str(&line(&mut row.iter().map(String::as_str)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_escapes_control_characters_and_aligns() {
        let t =
            Table { title: None, headers: vec!["k", "value"], rows: vec![vec!["a\nb".into(), "1".into()]] };
        assert_eq!(t.render(), "k    | value\n==== | =====\na\\nb | 1\n");
    }
}
