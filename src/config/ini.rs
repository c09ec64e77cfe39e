//! Reads `airflow.cfg` exactly as Airflow does: Python's `configparser.ConfigParser` with its
//! default settings, except that option names keep their case (Airflow's `optionxform` returns
//! the name unchanged, and its lookups lower-case the requested key, so an upper-case key in the
//! file is never found).
//!
//! Parsing is eager and strict like configparser's: a line before any section header, a line
//! with neither `=` nor `:`, an empty option name, a repeated section or a repeated option in a
//! section make the whole file unreadable. `%` interpolation, on the other hand, only happens
//! when a value is asked for, as in Python: a broken `%` in an option nobody reads is harmless.

use std::path::{Path, PathBuf};

use super::ConfigError;
use super::sources::ConfigFile;

/// The section whose options every other section inherits.
pub(crate) const DEFAULT_SECTION: &str = "DEFAULT";

/// configparser's `MAX_INTERPOLATION_DEPTH`.
const MAX_INTERPOLATION_DEPTH: usize = 10;

/// One option as written in the file: the value is the raw text (continuation lines joined by
/// `\n`), before `%` interpolation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IniOption {
    pub(crate) name: String,
    pub(crate) value: String,
    /// 1-based line of the option's first line.
    pub(crate) line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IniSection {
    pub(crate) name: String,
    pub(crate) options: Vec<IniOption>,
}

/// A parsed INI file: its `[DEFAULT]` options and its other sections in file order.
#[derive(Debug, Clone)]
pub(crate) struct IniFile {
    path: PathBuf,
    defaults: Vec<IniOption>,
    sections: Vec<IniSection>,
}

/// A looked-up value as Airflow would see it (interpolated, in an INI file) and the line its
/// option starts on; a TOML file's values are read into it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IniValue {
    pub(crate) value: String,
    pub(crate) line: usize,
}

/// Python's `str.isspace()`, which `str.strip()` and the `\s` of configparser's patterns use:
/// Rust's notion plus the four ASCII information separators.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Splits like Python's text-mode file iteration (universal newlines): `\n`, `\r\n` and a lone
/// `\r` all end a line, and no empty line follows a final line end.
fn universal_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.split('\n').flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r')).collect()
}

/// configparser's `SECTCRE` (`\[(?P<header>.+)\]`, matched at the start): everything between the
/// opening bracket and the LAST closing bracket, which must enclose at least one character.
/// Text after that bracket is ignored, as in Python.
fn section_header(value: &str) -> Option<&str> {
    let rest = value.strip_prefix('[')?;
    let close = rest.rfind(']')?;
    (close > 0).then(|| &rest[..close])
}

/// configparser's `OPTCRE` with the delimiters `=` and `:`: the first delimiter wins, and the
/// whitespace around name and value is dropped.
fn option_line(value: &str) -> Option<(&str, &str)> {
    let pos = value.find(['=', ':'])?;
    let name = value[..pos].trim_end_matches(py_space);
    let val = value[pos + 1..].trim_matches(py_space);
    Some((name, val))
}

/// An option while its continuation lines are still being collected.
struct Pending {
    name: String,
    pieces: Vec<String>,
    line: usize,
}

struct PendingSection {
    name: String,
    line: usize,
    options: Vec<Pending>,
}

pub(super) fn parse_error(path: &Path, line: usize, message: impl Into<String>) -> ConfigError {
    ConfigError::Parse { path: path.to_path_buf(), line: Some(line), message: message.into() }
}

fn finish(options: Vec<Pending>) -> Vec<IniOption> {
    options
        .into_iter()
        .map(|p| IniOption {
            name: p.name,
            // configparser joins with `\n` and then drops trailing whitespace, which removes
            // the empty lines that followed the value's last non-empty line.
            value: p.pieces.join("\n").trim_end_matches(py_space).to_owned(),
            line: p.line,
        })
        .collect()
}

/// Adds the option on line `lineno` to a section and returns its index there.
fn add_option(
    section: &mut PendingSection,
    value: &str,
    path: &Path,
    lineno: usize,
) -> Result<usize, ConfigError> {
    let Some((name, val)) = option_line(value) else {
        return Err(parse_error(
            path,
            lineno,
            "line is neither a [section] header nor an option: it has no '=' or ':'",
        ));
    };
    if name.is_empty() {
        return Err(parse_error(path, lineno, "option line has an empty name before its '=' or ':'"));
    }
    if let Some(first) = section.options.iter().find(|o| o.name == name) {
        return Err(parse_error(
            path,
            lineno,
            format!(
                "option `{name}` appears twice in section [{}] (first at line {})",
                section.name, first.line
            ),
        ));
    }
    section.options.push(Pending { name: name.to_owned(), pieces: vec![val.to_owned()], line: lineno });
    Ok(section.options.len() - 1)
}

/// Parses `text` (the file's contents, already decoded) read from `path`.
pub(crate) fn parse_ini(text: &str, path: &Path) -> Result<IniFile, ConfigError> {
    if text.starts_with('\u{feff}') {
        // Python reads the mark as part of the first line, so Airflow fails on such a file
        // with "File contains no section headers"; a clearer message helps more than a
        // silent acceptance Airflow itself would not give.
        return Err(parse_error(
            path,
            1,
            "the file starts with a UTF-8 byte-order mark, which Airflow's configparser \
             rejects (\"File contains no section headers\"); save the file without it",
        ));
    }

    // `[DEFAULT]` first, then the sections in file order.
    let mut sections =
        vec![PendingSection { name: DEFAULT_SECTION.to_owned(), line: 0, options: Vec::new() }];
    // The section the lines belong to; none before the first header.
    let mut cursor: Option<usize> = None;
    // Index of the option that continuation lines extend, in the current section.
    let mut current: Option<usize> = None;
    // Indentation of the last section header or option line, in characters.
    let mut indent_level = usize::MAX;

    for (index, line) in universal_lines(text).into_iter().enumerate() {
        let lineno = index + 1;
        let stripped = line.trim_matches(py_space);
        let is_comment = stripped.starts_with('#') || stripped.starts_with(';');
        let value = if is_comment { "" } else { stripped };

        let options = cursor.map(|i| &mut sections[i].options);

        if value.is_empty() {
            // A blank line belongs to the value being continued (it is dropped again if no
            // continuation follows); a comment line is skipped without ending the value.
            if !is_comment && let (Some(options), Some(i)) = (options, current) {
                options[i].pieces.push(String::new());
            }
            continue;
        }

        let indent = line.chars().take_while(|c| py_space(*c)).count();
        if let (Some(options), Some(i)) = (options, current)
            && indent > indent_level
        {
            options[i].pieces.push(value.to_owned());
            continue;
        }
        indent_level = indent;

        if let Some(header) = section_header(value) {
            match sections.iter().position(|s| s.name == header) {
                // configparser does not count `[DEFAULT]` as a section, so it may appear more
                // than once; a repeated option inside it is still caught by `add_option`.
                Some(0) => cursor = Some(0),
                Some(first) => {
                    return Err(parse_error(
                        path,
                        lineno,
                        format!("section [{header}] appears twice (first at line {})", sections[first].line),
                    ));
                }
                None => {
                    sections.push(PendingSection {
                        name: header.to_owned(),
                        line: lineno,
                        options: Vec::new(),
                    });
                    cursor = Some(sections.len() - 1);
                }
            }
            current = None;
            continue;
        }

        let Some(i) = cursor else {
            return Err(parse_error(
                path,
                lineno,
                "File contains no section headers: this line comes before the first [section] header",
            ));
        };
        current = Some(add_option(&mut sections[i], value, path, lineno)?);
    }

    let mut sections = sections.into_iter().map(|s| IniSection { name: s.name, options: finish(s.options) });
    let defaults = sections.next().map(|s| s.options).unwrap_or_default();
    Ok(IniFile { path: path.to_path_buf(), defaults, sections: sections.collect() })
}

/// Why a value could not be interpolated; `owner` is the option whose text holds the problem.
enum InterpolationError {
    Syntax { owner: String, problem: String },
    Missing { owner: String, name: String },
    TooDeep,
}

impl IniFile {
    /// The sections other than `[DEFAULT]`, in file order.
    #[cfg(test)]
    pub(crate) fn sections(&self) -> &[IniSection] {
        &self.sections
    }

    fn section(&self, name: &str) -> Option<&IniSection> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The raw option as configparser's `has_option`/`get` see it: the section's own option,
    /// else the `[DEFAULT]` one. `[DEFAULT]` options show through only in sections that exist
    /// in the file, as in Python.
    pub(crate) fn raw(&self, section: &str, key: &str) -> Option<&IniOption> {
        let from_defaults = || self.defaults.iter().find(|o| o.name == key);
        if section == DEFAULT_SECTION {
            return from_defaults();
        }
        let own = self.section(section)?;
        own.options.iter().find(|o| o.name == key).or_else(from_defaults)
    }

    /// The option names `section` answers to: its own, then the inherited `[DEFAULT]` ones.
    #[cfg(test)]
    pub(crate) fn options(&self, section: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        if section != DEFAULT_SECTION {
            let Some(own) = self.section(section) else {
                return names;
            };
            names.extend(own.options.iter().map(|o| o.name.as_str()));
        }
        for option in &self.defaults {
            if !names.contains(&option.name.as_str()) {
                names.push(&option.name);
            }
        }
        names
    }

    /// configparser's `BasicInterpolation`, step for step: a referenced value is expanded in
    /// turn only when it contains `%`, one level deeper each time.
    fn interpolate(
        &self,
        section: &str,
        owner: &str,
        text: &str,
        depth: usize,
        out: &mut String,
    ) -> Result<(), InterpolationError> {
        if depth > MAX_INTERPOLATION_DEPTH {
            return Err(InterpolationError::TooDeep);
        }
        let mut rest = text;
        while let Some(p) = rest.find('%') {
            out.push_str(&rest[..p]);
            let at = text.len() - rest.len() + p;
            rest = &rest[p..];
            if let Some(after) = rest.strip_prefix("%%") {
                out.push('%');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("%(") {
                // `%\(([^)]+)\)s`
                let name_end = after.find(')').filter(|&e| e > 0);
                let Some(end) = name_end.filter(|&e| after[e + 1..].starts_with('s')) else {
                    return Err(InterpolationError::Syntax {
                        owner: owner.to_owned(),
                        problem: format!(
                            "bad `%(name)s` reference at character {} of the value",
                            char_index(text, at)
                        ),
                    });
                };
                let name = &after[..end];
                rest = &after[end + 2..];
                let Some(referenced) = self.raw(section, name) else {
                    return Err(InterpolationError::Missing {
                        owner: owner.to_owned(),
                        name: name.to_owned(),
                    });
                };
                if referenced.value.contains('%') {
                    self.interpolate(section, &referenced.name, &referenced.value, depth + 1, out)?;
                } else {
                    out.push_str(&referenced.value);
                }
            } else {
                return Err(InterpolationError::Syntax {
                    owner: owner.to_owned(),
                    problem: format!(
                        "'%' at character {} of the value must be followed by '%' or '(' \
                         (write %% for a literal %)",
                        char_index(text, at)
                    ),
                });
            }
        }
        out.push_str(rest);
        Ok(())
    }
}

impl ConfigFile for IniFile {
    fn path(&self) -> &Path {
        &self.path
    }

    /// The interpolated value of `key` in `section` (`None` when configparser's `has_option`
    /// would say no). `%%` is a literal `%`, `%(name)s` the value of `name` in the same section
    /// or `[DEFAULT]`, recursively.
    fn get(&self, section: &str, key: &str) -> Result<Option<IniValue>, ConfigError> {
        let Some(option) = self.raw(section, key) else {
            return Ok(None);
        };
        let mut out = String::new();
        self.interpolate(section, &option.name, &option.value, 1, &mut out).map_err(|error| {
            let what = match error {
                InterpolationError::Syntax { owner, problem } if owner == key => problem,
                InterpolationError::Syntax { owner, problem } => {
                    format!("{problem} (in the value of `{owner}`, which it refers to)")
                }
                InterpolationError::Missing { owner, name } if owner == key => {
                    format!("`%({name})s` refers to an option that is not in [{section}] or [DEFAULT]")
                }
                InterpolationError::Missing { owner, name } => format!(
                    "`%({name})s` in the value of `{owner}`, which it refers to, names an \
                         option that is not in [{section}] or [DEFAULT]"
                ),
                InterpolationError::TooDeep => format!(
                    "`%(...)s` references nest more than {MAX_INTERPOLATION_DEPTH} levels deep \
                         (a reference loop?)"
                ),
            };
            parse_error(&self.path, option.line, format!("cannot expand % in [{section}] {key}: {what}"))
        })?;
        Ok(Some(IniValue { value: out, line: option.line }))
    }
}

/// 1-based character position of byte offset `at`, for messages that must not quote the value.
fn char_index(text: &str, at: usize) -> usize {
    text[..at].chars().count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;
    use std::process::Command;

    fn parse(text: &str) -> IniFile {
        match parse_ini(text, Path::new("/etc/airflow/airflow.cfg")) {
            Ok(file) => file,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn err(text: &str) -> String {
        match parse_ini(text, Path::new("/etc/airflow/airflow.cfg")) {
            Ok(file) => panic!("expected an error, got {file:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn get(file: &IniFile, section: &str, key: &str) -> Option<String> {
        match file.get(section, key) {
            Ok(v) => v.map(|v| v.value),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn get_err(file: &IniFile, section: &str, key: &str) -> String {
        match file.get(section, key) {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    // Every expectation below was checked with python3.11's configparser.ConfigParser() with
    // `optionxform = lambda s: s`, reading the same text from a file.

    #[test]
    fn delimiters_first_wins_and_whitespace_is_stripped() {
        let f = parse("[a]\nx = 1 # y\nz: 2 = 3\nw = a:b\nv  :  p : q\nkey with spaces = v\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1 # y"));
        assert_eq!(get(&f, "a", "z").as_deref(), Some("2 = 3"));
        assert_eq!(get(&f, "a", "w").as_deref(), Some("a:b"));
        assert_eq!(get(&f, "a", "v").as_deref(), Some("p : q"));
        assert_eq!(get(&f, "a", "key with spaces").as_deref(), Some("v"));
    }

    #[test]
    fn no_inline_comments_and_quotes_are_kept() {
        let f = parse("[a]\nx = x # y\ny = v ; w\nq = 'quoted'\nd = \"dq\"\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("x # y"));
        assert_eq!(get(&f, "a", "y").as_deref(), Some("v ; w"));
        assert_eq!(get(&f, "a", "q").as_deref(), Some("'quoted'"));
        assert_eq!(get(&f, "a", "d").as_deref(), Some("\"dq\""));
    }

    #[test]
    fn full_line_comments_even_indented() {
        let f = parse("# top\n; top\n[a]\n  ; indented comment\n # c\nx=1\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1"));
        assert_eq!(f.options("a"), vec!["x"]);
    }

    #[test]
    fn continuation_lines() {
        // python: {'x': '1\ncont\n\nmore'} and b.y == '2'
        let f = parse("[a]\nx=1\n  cont\n\n  more\n\n\n[b]\ny=2\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\ncont\n\nmore"));
        assert_eq!(get(&f, "b", "y").as_deref(), Some("2"));
        // trailing blank lines dropped: '1\ncont'
        let f = parse("[a]\nx=1\n  cont\n\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\ncont"));
        // empty first line: '\ny'
        let f = parse("[a]\nx=\n  y\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("\ny"));
        // a deeper `key = value` line is a continuation, not an option: '1\ny=2'
        let f = parse("[a]\nx=1\n  y=2\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\ny=2"));
        assert_eq!(get(&f, "a", "y"), None);
        // an indented section header is a continuation too: '1\n[b]'
        let f = parse("[a]\nx=1\n   [b]\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\n[b]"));
        assert!(f.sections().iter().all(|s| s.name != "b"));
        // comment lines inside a value are skipped: '1\nmore'
        let f = parse("[a]\nx=1\n  # comment\n  ; c2\n  more\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\nmore"));
        // tab indentation and whitespace-only lines: '1\n\ny'
        let f = parse("[a]\nx=1\n\t\n\ty\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\n\ny"));
        // indentation is relative to the option line: x='1', y='2\ncont', z='3'
        let f = parse("[a]\n  x=1\n  y=2\n    cont\n z=3\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1"));
        assert_eq!(get(&f, "a", "y").as_deref(), Some("2\ncont"));
        assert_eq!(get(&f, "a", "z").as_deref(), Some("3"));
        // a backslash is not a line continuation: 'a\\\nb'
        let f = parse("[a]\nx = a\\\n  b\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("a\\\nb"));
    }

    #[test]
    fn unicode_whitespace_counts_as_python_does() {
        // U+3000 indents, U+001C is whitespace for Python: x='1\ny' twice, then x='1'
        let f = parse("[a]\n\u{3000}x=1\n\u{3000}\u{3000}y\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\ny"));
        let f = parse("[a]\nx=1\n\u{1c} y\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\ny"));
        let f = parse("[a]\nx=\u{1c}1\u{1c}\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1"));
    }

    #[test]
    fn keys_keep_their_case() {
        // python with Airflow's optionxform: {'X': '1', 'x': '2'}
        let f = parse("[a]\nX = 1\nx = 2\n");
        assert_eq!(get(&f, "a", "X").as_deref(), Some("1"));
        assert_eq!(get(&f, "a", "x").as_deref(), Some("2"));
        let f = parse("[database]\nSQL_ALCHEMY_CONN = sqlite:////tmp/upper.db\n");
        assert_eq!(get(&f, "database", "sql_alchemy_conn"), None);
    }

    #[test]
    fn section_names_are_case_sensitive_and_taken_verbatim() {
        let f = parse("[Database]\nx=1\n[ a ]\ny=2\n[a] trailing\nz=3\n[]]\nw=4\n");
        let names: Vec<&str> = f.sections().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["Database", " a ", "a", "]"]);
        assert_eq!(get(&f, "database", "x"), None);
        // `[a] = b` is a header for a section `a`, which then appears twice
        assert!(err("[a] = b\n[a]\n").contains("line 2: section [a] appears twice"));
        // an unclosed bracket line is an option line: {'[b': 'c'}
        let f = parse("[a]\n[b=c\n");
        assert_eq!(get(&f, "a", "[b").as_deref(), Some("c"));
    }

    #[test]
    fn default_section_is_inherited_only_by_existing_sections() {
        let f = parse("[DEFAULT]\nd=1\nx=from-default\n[a]\nx=%(d)s\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1"));
        assert_eq!(get(&f, "a", "d").as_deref(), Some("1"));
        assert_eq!(get(&f, "DEFAULT", "x").as_deref(), Some("from-default"));
        assert_eq!(get(&f, "missing", "d"), None);
        assert_eq!(f.options("a"), vec!["x", "d"]);
        // two [DEFAULT] blocks are fine, a key repeated across them is not
        let f = parse("[DEFAULT]\nx=1\n[a]\n[DEFAULT]\ny=2\n");
        assert_eq!(get(&f, "a", "y").as_deref(), Some("2"));
        assert!(
            err("[DEFAULT]\nx=1\n[a]\n[DEFAULT]\nx=2\n")
                .contains("line 5: option `x` appears twice in section [DEFAULT] (first at line 2)")
        );
        // lower-case `default` is an ordinary section
        let f = parse("[default]\nx=1\n[a]\n");
        assert_eq!(get(&f, "a", "x"), None);
    }

    #[test]
    fn interpolation() {
        let f = parse("[a]\nx = %%d\ny = %(x)s+\nz = 50%\nu = %(X)s\nX = up\nw = 100%%\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("%d"));
        assert_eq!(get(&f, "a", "y").as_deref(), Some("%d+"));
        assert_eq!(get(&f, "a", "u").as_deref(), Some("up"));
        assert_eq!(get(&f, "a", "w").as_deref(), Some("100%"));
        let e = get_err(&f, "a", "z");
        assert_eq!(
            e,
            "/etc/airflow/airflow.cfg line 4: cannot expand % in [a] z: '%' at character 3 of \
             the value must be followed by '%' or '(' (write %% for a literal %)"
        );
    }

    #[test]
    fn interpolation_errors_name_the_option_not_the_value() {
        let f = parse("[a]\nx=%(y)d\ny=1\nm=%(nope)s\ne=%()s\nr=%(bad)s\nbad=p4ss%word\nloop=%(loop)s\n");
        assert!(get_err(&f, "a", "x").contains("line 2: cannot expand % in [a] x: bad `%(name)s`"));
        assert!(get_err(&f, "a", "m").contains(
            "line 4: cannot expand % in [a] m: `%(nope)s` refers to an option that is not in [a] or [DEFAULT]"
        ));
        assert!(get_err(&f, "a", "e").contains("bad `%(name)s` reference at character 1"));
        let e = get_err(&f, "a", "r");
        assert!(e.contains("in the value of `bad`, which it refers to"), "{e}");
        assert!(!e.contains("p4ss"), "{e}");
        assert!(get_err(&f, "a", "loop").contains("nest more than 10 levels"));
    }

    #[test]
    fn interpolation_depth_limit_matches_python() {
        // python: k0 fails (k10 is reached at depth 11), k1 succeeds with '%'
        let mut text = String::from("[a]\n");
        for i in 0..10 {
            let _ = writeln!(text, "k{i}=%(k{})s", i + 1);
        }
        text.push_str("k10=%%\n");
        let f = parse(&text);
        assert!(get_err(&f, "a", "k0").contains("nest more than 10 levels"));
        assert_eq!(get(&f, "a", "k1").as_deref(), Some("%"));
        // a referenced value without % is used as is
        let f = parse("[a]\nx=%(y)s\ny=plain\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("plain"));
    }

    #[test]
    fn a_broken_percent_elsewhere_is_harmless() {
        let f = parse("[webserver]\nbad = 50%\n[database]\nsql_alchemy_conn = sqlite:///x\n");
        assert_eq!(get(&f, "database", "sql_alchemy_conn").as_deref(), Some("sqlite:///x"));
    }

    #[test]
    fn structural_errors() {
        assert_eq!(
            err("x=1\n[a]\n"),
            "/etc/airflow/airflow.cfg line 1: File contains no section headers: this line \
             comes before the first [section] header"
        );
        assert!(err("\n# c\n  \n[]\nx=1\n").contains("line 4: File contains no section headers"));
        assert!(err("[a\nx=1\n").contains("line 1: File contains no section headers"));
        assert!(err("[a]\n[a]\n").contains("line 2: section [a] appears twice (first at line 1)"));
        assert!(err("[a]\nx=1\n[b]\n[a]\n").contains("line 4: section [a] appears twice"));
        assert!(
            err("[a]\nX=1\nY=2\nX=3\n")
                .contains("line 4: option `X` appears twice in section [a] (first at line 2)")
        );
        assert!(err("[a]\nnodelim\n").contains("line 2: line is neither a [section] header"));
        assert!(err("[a]\nx =\ny\n").contains("line 3: line is neither"));
        assert!(err("[a]\n=1\n").contains("line 2: option line has an empty name"));
        assert!(err("[a]\n  : 1\n").contains("line 2: option line has an empty name"));
    }

    #[test]
    fn bom_is_refused_like_airflow() {
        let e = err("\u{feff}[a]\nx=1\n");
        assert!(
            e.starts_with("/etc/airflow/airflow.cfg line 1: the file starts with a UTF-8 byte-order mark")
        );
    }

    #[test]
    fn line_ends_and_line_numbers() {
        // python: {'x': '1', 'y': '2', 'z': '3'}; a lone CR ends a line
        let f = parse("[a]\r\nx=1\ry=2\r\nz=3\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1"));
        assert_eq!(get(&f, "a", "y").as_deref(), Some("2"));
        let z = f.get("a", "z").ok().flatten();
        assert_eq!(z, Some(IniValue { value: "3".into(), line: 4 }));
        let f = parse("# c\n\n[a]\nx = first\n  second\ny = 2");
        assert_eq!(f.raw("a", "x").map(|o| o.line), Some(4));
        assert_eq!(f.raw("a", "y").map(|o| o.line), Some(6));
        let f = parse("[a]\r\nx = 1\r\n  more\r\n\r\n");
        assert_eq!(get(&f, "a", "x").as_deref(), Some("1\nmore"));
    }

    /// Tricky files for the differential test: each is read by python3's configparser and by
    /// `parse_ini`, and every section, option and value (or the fact of an error) must agree.
    const DIFFERENTIAL_CASES: &[&str] = &[
        "[core]\ndags_folder = /x\n[database]\nsql_alchemy_conn = postgresql://u:p%%40ss@h/db\n",
        "[a]\nx = 1 # not a comment\ny: 2 = 3\nz = a:b=c\n",
        "[a]\nx=1\n  cont\n\n  more\n\n\n[b]\ny=2\n",
        "[a]\nx=\n  y\n    z\n\n",
        "[a]\n  x=1\n  y=2\n    cont\n z=3\n w\n",
        "[a]\nx=1\n  # c\n  ; c\n\n  more\n",
        "[DEFAULT]\nd=dv\nx=dx\n[a]\nx=%(d)s-%%-%(x)s\n[b]\ny=%(x)s\n",
        "[a]\nX=upper\nx=lower\nref=%(X)s/%(x)s\n",
        "[ spaced ]\nk=v\n[a] trailing text\nk=v\n[]]\nk=v\n",
        "[a]\nz = 50%\nok = 1\n",
        "[a]\nr=%(m)s\nb=%(x)d\n",
        "x=1\n[a]\n",
        "[a]\n[b]\n[a]\n",
        "[a]\nk=1\nk=2\n",
        "[a]\nnodelim\n",
        "[a]\r\nx=1\ry=2\r\n  cont\r\n",
        "[a]\n\u{3000}x=1\n\u{3000}\u{3000}y\n\u{1c}z=2\n",
        "[a]\nx=1\n\x0c\n  y\n\t\n",
        "[DEFAULT]\nk=1\n[a]\n[DEFAULT]\nk=2\n",
        "\u{feff}[a]\nx=1\n",
        "[a]\nloop=%(loop)s\nv=%(w)s\nw=%%(v)s\n",
        "[a]\n=empty\n",
        "# only comments\n; here\n",
    ];

    fn unhex(s: &str) -> String {
        let bytes: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from python"))
            .collect();
        String::from_utf8(bytes).expect("UTF-8 from python")
    }

    #[derive(Debug, Default, PartialEq)]
    struct Dump {
        error: bool,
        // (section, option, Some(value) or None for an interpolation error)
        entries: Vec<(String, String, Option<String>)>,
    }

    const PYTHON_DUMP: &str = r"
import configparser, sys
def h(s): return s.encode('utf-8').hex()
for path in sys.argv[1:]:
    print('FILE')
    p = configparser.ConfigParser()
    p.optionxform = lambda s: s
    try:
        p.read(path, encoding='utf-8')
    except configparser.Error:
        print('ERROR')
        continue
    for s in ['DEFAULT'] + p.sections():
        keys = list(p.defaults()) if s == 'DEFAULT' else p.options(s)
        for k in keys:
            try:
                print('V', h(s), h(k), h(p.get(s, k)))
            except configparser.Error:
                print('I', h(s), h(k))
";

    fn rust_dump(text: &str) -> Dump {
        let Ok(file) = parse_ini(text, Path::new("case.cfg")) else {
            return Dump { error: true, entries: Vec::new() };
        };
        let mut entries = Vec::new();
        let mut sections = vec![DEFAULT_SECTION.to_owned()];
        sections.extend(file.sections().iter().map(|s| s.name.clone()));
        for section in &sections {
            for key in file.options(section) {
                let value = file.get(section, key).ok().flatten().map(|v| v.value);
                entries.push((section.clone(), key.to_owned(), value));
            }
        }
        Dump { error: false, entries }
    }

    /// Reads every file with python3's configparser (as Airflow configures it) and with
    /// `parse_ini`, and returns python's dumps.
    fn python_dumps(cases: &[String], tag: &str) -> Vec<Dump> {
        let dir = std::env::temp_dir().join(format!("state-store-ini-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut paths = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let path = dir.join(format!("case{i:03}.cfg"));
            std::fs::write(&path, case).expect("write case");
            paths.push(path);
        }
        let output = Command::new("python3").arg("-c").arg(PYTHON_DUMP).args(&paths).output();
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
        let output = output.expect("python3 is needed for this test and could not be run");
        assert!(output.status.success(), "python3 failed: {}", String::from_utf8_lossy(&output.stderr));
        let stdout = String::from_utf8(output.stdout).expect("python prints ASCII");
        let mut dumps: Vec<Dump> = Vec::new();
        for line in stdout.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields[0] {
                "FILE" => dumps.push(Dump::default()),
                "ERROR" => dumps.last_mut().expect("FILE first").error = true,
                "V" => dumps.last_mut().expect("FILE first").entries.push((
                    unhex(fields[1]),
                    unhex(fields[2]),
                    Some(unhex(fields[3])),
                )),
                "I" => dumps.last_mut().expect("FILE first").entries.push((
                    unhex(fields[1]),
                    unhex(fields[2]),
                    None,
                )),
                other => panic!("unexpected python output {other}"),
            }
        }
        assert_eq!(dumps.len(), cases.len());
        dumps
    }

    #[test]
    fn differential_against_python_configparser() {
        let cases: Vec<String> = DIFFERENTIAL_CASES.iter().map(|c| (*c).to_owned()).collect();
        let dumps = python_dumps(&cases, "diff");
        for (case, python) in DIFFERENTIAL_CASES.iter().zip(&dumps) {
            assert_eq!(&rust_dump(case), python, "case {case:?}");
        }
        // the cases must exercise both outcomes
        assert!(dumps.iter().filter(|d| d.error).count() >= 5);
        assert!(dumps.iter().filter(|d| !d.error).count() >= 12);
    }

    /// Generated files, line by line from the pieces configparser treats specially: section
    /// headers, `=` and `:` delimiters, keys differing in case, `%%`, `%(name)s` references
    /// (good and broken), `#` and `;` inside values and as comments, indented continuation
    /// lines, blank lines, DEFAULT, duplicates. Every one reads the same as in python3. The
    /// seed is in every failure.
    #[test]
    fn generated_files_match_python_configparser() {
        use crate::test_rng::Rng;
        const SECTIONS: &[&str] =
            &["[core]", "[database]", "[DEFAULT]", "[state_store]", "[Core]", "[ a b ]", "[x]y", "[]"];
        const KEYS: &[&str] = &["k", "K", "key", "Key", "sql_alchemy_conn", "a b", "k2", "%k", "é", ""];
        const DELIMS: &[&str] = &["=", " = ", ":", " : ", "=  ", " =", "=="];
        const VALUES: &[&str] = &[
            "1",
            "",
            "a # b",
            "a ; b",
            "50%%",
            "%(k)s",
            "%(K)s",
            "%(key)s/x",
            "%(nope)s",
            "%",
            "%%(k)s",
            "a%%b%%c",
            "  spaced  ",
            "x:y=z",
            "postgresql://u:p%%40ss@h/db",
            "True",
            "ü€",
            "#not a comment",
            ";nor this",
            "%(k)",
        ];
        const OTHER: &[&str] =
            &["", "# comment", "; comment", "  # indented comment", "\t", "   ", "no delimiter"];
        let seed = 0x1ee7_c0de_5eed_0001_u64;
        let mut rng = Rng(seed);
        let mut cases = Vec::new();
        for _ in 0..300 {
            let mut text = String::new();
            if !rng.next().is_multiple_of(6) {
                text.push_str(rng.pick(SECTIONS));
                text.push('\n');
            }
            for _ in 0..rng.next() % 12 {
                match rng.next() % 10 {
                    0 => text.push_str(rng.pick(SECTIONS)),
                    1 => text.push_str(rng.pick(OTHER)),
                    2 | 3 => {
                        text.push_str(rng.pick(&["  ", "\t", " "]));
                        text.push_str(rng.pick(VALUES));
                    }
                    _ => {
                        text.push_str(rng.pick(KEYS));
                        text.push_str(rng.pick(DELIMS));
                        text.push_str(rng.pick(VALUES));
                    }
                }
                text.push_str(rng.pick(&["\n", "\n", "\n", "\r\n"]));
            }
            cases.push(text);
        }
        let dumps = python_dumps(&cases, "generated");
        for (i, (case, python)) in cases.iter().zip(&dumps).enumerate() {
            assert_eq!(&rust_dump(case), python, "seed {seed:#x}, file {i}: {case:?}");
        }
        assert!(dumps.iter().filter(|d| d.error).count() >= 20, "both outcomes are exercised");
        assert!(dumps.iter().filter(|d| !d.error && !d.entries.is_empty()).count() >= 50);
    }
}
