//! The floors of docs/architecture.md, kept: every room of `src/` (a top-level file or folder)
//! may use only rooms on a lower floor. The table is read from the document, between
//! `<!-- floors -->` and `<!-- /floors -->`; a room's uses are the `crate::ROOM` paths of its
//! files (and a `super::` that climbs to the crate's root; in lib.rs, the root, `ROOM::`
//! too), leaving out comments, string literals and `#[cfg(test)]` items.
//! `cargo test --test layers -- --nocapture` prints the room graph. The sizes the same page
//! names (files, command functions) are read from `scripts/code-lines.py`.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors table: room → floor.
fn floors(doc: &str) -> BTreeMap<String, u32> {
    let start = doc.find("<!-- floors -->").expect("docs/architecture.md: no <!-- floors --> marker");
    let end = doc.find("<!-- /floors -->").expect("docs/architecture.md: no <!-- /floors --> marker");
    let mut floors = BTreeMap::new();
    for line in doc[start..end].lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, floor, rooms, ..] = cells[..] else { continue };
        let Ok(floor) = floor.parse::<u32>() else { continue };
        for room in rooms.split(',').map(|r| r.trim().trim_matches('`')).filter(|r| !r.is_empty()) {
            assert!(floors.insert(room.to_string(), floor).is_none(), "room {room} is on two floors");
        }
    }
    floors
}

/// The text with comments, string and character literals blanked out (newlines kept).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let at = |k: usize| chars.get(k).copied().unwrap_or(' ');
    while i < chars.len() {
        let start = i;
        if chars[i] == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if chars[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 1;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 1;
                }
                i += 1;
                if depth == 0 || i >= chars.len() {
                    break;
                }
            }
        } else if chars[i] == 'r' && (at(i + 1) == '"' || at(i + 1) == '#') {
            let hashes = (1..).take_while(|&n| at(i + n) == '#').count();
            if at(i + 1 + hashes) != '"' {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if chars[i] == '\'' && (at(i + 2) == '\'' || at(i + 1) == '\\') {
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let end = i.min(chars.len());
        chars[start..end].iter().for_each(|&c| blank(&mut out, c));
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
}

/// The code without its `#[cfg(test)]` items (an attribute through the item's `;` or its
/// closing brace).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = ["#[cfg(test)]", "#[cfg(all(test"].iter().filter_map(|a| rest.find(a)).min() {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let attr_end = item.find(']').unwrap() + 1;
        let mut depth = 0;
        let mut end = item.len();
        for (i, c) in item[attr_end..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ';' if depth == 0 => {}
                _ => continue,
            }
            if depth == 0 {
                end = attr_end + i + 1;
                break;
            }
        }
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out + rest
}

/// The rooms a file's code names: `crate::ROOM`, each ROOM of a `crate::{…}` group, and
/// `super::ROOM` where the `super`s climb to the root from a module `depth` levels down.
fn rooms_used(code: &str, depth: usize) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let next_ident = |s: &str| {
        s.trim_start().split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap().to_string()
    };
    for (at, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
        if ident(code[..at].chars().last().as_ref()) || code[..at].trim_end().ends_with("::") {
            continue;
        }
        let mut rest = &code[at..];
        if rest.starts_with("super::") {
            let mut supers = 0;
            while let Some(after) = rest.strip_prefix("super::") {
                (supers, rest) = (supers + 1, after);
            }
            if supers < depth {
                continue;
            }
        } else {
            rest = &rest["crate::".len()..];
        }
        let Some(group) = rest.trim_start().strip_prefix('{') else {
            used.insert(next_ident(rest));
            continue;
        };
        let (mut level, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => level += 1,
                '}' if level == 0 => {
                    used.insert(next_ident(&group[start..i]));
                    break;
                }
                '}' => level -= 1,
                ',' if level == 0 => {
                    used.insert(next_ident(&group[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
    }
    used.retain(|room| !room.is_empty() && room != "self");
    used
}

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn a_room_uses_only_rooms_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let floors = floors(&std::fs::read_to_string(root.join("docs/architecture.md")).unwrap());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut faults = Vec::new();
    for path in sources(&root.join("src")) {
        let relative = path.strip_prefix(root).unwrap();
        let parts: Vec<String> = relative.iter().skip(1).map(|p| p.to_string_lossy().into_owned()).collect();
        let room = parts[0].trim_end_matches(".rs").to_string();
        let depth = parts.len() - usize::from(parts.last().unwrap() == "mod.rs");
        let Some(&floor) = floors.get(&room) else {
            faults
                .push(format!("{}: room {room} is on no floor of docs/architecture.md", relative.display()));
            continue;
        };
        let code = without_tests(&code_only(&std::fs::read_to_string(&path).unwrap()));
        let mut uses = rooms_used(&code, depth);
        if room == "lib" {
            // The crate's root names its modules without `crate::`.
            for (at, _) in code.match_indices("::") {
                let name = code[..at].rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap();
                if floors.contains_key(name) && !code[..at - name.len()].ends_with("::") {
                    uses.insert(name.to_string());
                }
            }
        }
        for used in uses.into_iter().filter(|used| *used != room) {
            match floors.get(&used) {
                Some(&to) if to < floor => {}
                to => faults.push(format!(
                    "{}: {room} (floor {floor}) -> {used} (floor {})",
                    relative.display(),
                    to.map_or("none".to_string(), |to| to.to_string())
                )),
            }
            graph.entry(room.clone()).or_default().insert(used);
        }
    }
    let mut rooms: Vec<_> = floors.iter().collect();
    rooms.sort_by_key(|(room, floor)| (std::cmp::Reverse(**floor), room.as_str()));
    for (room, floor) in rooms {
        let uses: Vec<_> = graph.get(room).into_iter().flatten().map(String::as_str).collect();
        println!("{floor:>2} {room} -> {}", uses.join(", "));
    }
    assert!(faults.is_empty(), "rooms that reach their own floor or above:\n{}", faults.join("\n"));
}

#[test]
fn reads_groups_and_inline_paths() {
    let code =
        code_only("use crate::{error::Result, output::{self, Format}};\nfn f() { crate::time::now(); }");
    assert_eq!(rooms_used(&code, 1), BTreeSet::from(["error", "output", "time"].map(String::from)));
    assert_eq!(rooms_used("use super::super::db::Store;", 2), BTreeSet::from(["db".to_string()]));
    assert!(rooms_used("use super::Store; use $crate::x;", 2).is_empty());
}

#[test]
fn leaves_out_tests_comments_and_strings() {
    let text = "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n    fn f() { '{'; }\n}\nconst S: &str = \"crate::d\";\n#[cfg(test)]\nuse crate::e;\nfn g() { crate::f::h() }\n";
    let code = without_tests(&code_only(text));
    assert_eq!(rooms_used(&code, 1), BTreeSet::from(["a", "f"].map(String::from)));
    assert_eq!(code.lines().count(), text.lines().count());
}

#[test]
fn reads_the_table_between_the_markers() {
    let doc = "| 9 | x |\n<!-- floors -->\n| floor | rooms |\n|---|---|\n| 1 | `a`, b |\n| 0 | c |\n<!-- /floors -->\n";
    let expected = BTreeMap::from([("a", 1), ("b", 1), ("c", 0)].map(|(r, f)| (r.to_string(), f)));
    assert_eq!(floors(doc), expected);
}

/// `scripts/code-lines.py`'s figures, as it prints them: each line's count and its place.
fn code_lines(args: &[&str]) -> Vec<(usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .arg(root.join("scripts/code-lines.py"))
        .args(args)
        .current_dir(root)
        .output()
        .expect("python3 runs scripts/code-lines.py");
    assert!(out.status.success(), "scripts/code-lines.py: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows = text.lines().filter_map(|line| {
        let (count, place) = line.trim_start().split_once(' ')?;
        Some((count.parse().ok()?, place.to_string()))
    });
    rows.collect()
}

/// The sizes docs/architecture.md names: no file of src over 900 code lines, no function of
/// src/commands over 60 (a command reads its flags, calls one operation, prints).
#[test]
fn no_file_over_900_code_lines_and_no_command_function_over_60() {
    let files: Vec<_> =
        code_lines(&["src"]).into_iter().filter(|(_, place)| place.ends_with(".rs")).collect();
    assert!(files.len() > 50, "scripts/code-lines.py listed {} files", files.len());
    let large: Vec<_> = files.iter().filter(|(n, _)| *n > 900).collect();
    assert!(large.is_empty(), "files over 900 code lines: {large:?}");
    let functions = code_lines(&["--functions", "src/commands"]);
    assert!(functions.iter().any(|(_, place)| place.ends_with(" run")), "no command's run was counted");
    let long: Vec<_> = functions.iter().filter(|(n, _)| *n > 60).collect();
    assert!(long.is_empty(), "command functions over 60 code lines: {long:?}");
}
