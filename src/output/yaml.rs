//! YAML in block style. Strings are always double-quoted with JSON escapes, which YAML reads
//! back as the same string whatever they contain (`yes`, `1.0`, `:`, newlines…).

use crate::json::{self, Value};

/// The YAML text of a document, final newline included.
pub(super) fn render(doc: &Value) -> String {
    let mut out = String::new();
    node(doc, 0, &mut out);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Field names print bare; any key YAML could read as something else is quoted.
fn key(key: &str) -> String {
    let bare = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if bare { key.to_string() } else { json::dumps_unicode(&Value::String(key.to_string())) }
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("null".to_string()),
        Value::Bool(b) => Some(if *b { "true" } else { "false" }.to_string()),
        Value::Number(_) | Value::String(_) => Some(json::dumps_unicode(value)),
        Value::Array(items) if items.is_empty() => Some("[]".to_string()),
        Value::Object(fields) if fields.is_empty() => Some("{}".to_string()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn node(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                inline_child(item, indent + 2, out);
            }
        }
        Value::Object(fields) if !fields.is_empty() => {
            for (name, item) in fields {
                out.push_str(&pad);
                out.push_str(&key(name));
                out.push(':');
                match scalar(item) {
                    Some(s) => {
                        out.push(' ');
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        out.push('\n');
                        node(item, indent + 2, out);
                    }
                }
            }
        }
        other => {
            out.push_str(&pad);
            out.push_str(&scalar(other).unwrap_or_default());
            out.push('\n');
        }
    }
}

/// The first line of a sequence item continues after "- ": nested collections start there.
fn inline_child(item: &Value, indent: usize, out: &mut String) {
    if let Some(s) = scalar(item) {
        out.push_str(&s);
        out.push('\n');
        return;
    }
    let mut nested = String::new();
    node(item, indent, &mut nested);
    out.push_str(nested.get(indent..).unwrap_or(&nested));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_nests_sequences_and_mappings() {
        let doc = serde_json::json!([{"key": "a", "value": [1, 2]}, ["x", {}]]);
        assert_eq!(render(&doc), "- key: \"a\"\n  value:\n    - 1\n    - 2\n- - \"x\"\n  - {}\n");
    }
}
