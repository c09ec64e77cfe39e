//! YAML in block style, written by serde-saphyr. Every string is double-quoted, with YAML's
//! escapes inside, so `"yes"`, `"1.0"` or a timestamp read back as the same string in YAML 1.1
//! and 1.2 readers alike; numbers keep their exact value.

use std::io;

use serde::ser::{Serialize, Serializer};
use serde_saphyr::{DoubleQuoted, Tagged};

use crate::json::Value;

/// The YAML text of a document, final newline included.
pub(super) fn render(doc: &Value) -> io::Result<String> {
    let options = serde_saphyr::ser_options! { compact_list_indent: false };
    serde_saphyr::to_string_with_options(&Yaml(doc), options).map_err(io::Error::other)
}

/// A document as the YAML serializer is to see it. A serde_json number of arbitrary precision
/// reaches any other serializer as a private map (`$serde_json::private::Number: '17'`), so
/// each number is handed over as the integer or float it is.
struct Yaml<'a>(&'a Value);

impl Serialize for Yaml<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(n) if n.as_str().contains(['.', 'e', 'E']) => {
                serializer.serialize_f64(n.as_str().parse().unwrap_or(f64::NAN))
            }
            Value::Number(n) => match n.as_str().parse::<i128>() {
                Ok(n) => serializer.serialize_i128(n),
                // Serde has no integer wider than 128 bits: the digits, tagged as an integer.
                Err(_) => Tagged(n.as_str(), Some("tag:yaml.org,2002:int".to_string())).serialize(serializer),
            },
            Value::String(text) => DoubleQuoted(text.as_str()).serialize(serializer),
            Value::Array(items) => serializer.collect_seq(items.iter().map(Yaml)),
            Value::Object(fields) => {
                serializer.collect_map(fields.iter().map(|(key, value)| (key, Yaml(value))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> String {
        render(&crate::json::parse(text).unwrap()).unwrap()
    }

    #[test]
    fn yaml_nests_sequences_and_mappings() {
        let doc = r#"[{"key": "a", "value": [1, 2]}, ["x", {}], {"m": {"k": []}}]"#;
        assert_eq!(
            yaml(doc),
            "- key: \"a\"\n  value:\n    - 1\n    - 2\n- - \"x\"\n  - {}\n- m:\n    k: []\n"
        );
    }

    #[test]
    fn strings_are_double_quoted_and_numbers_exact() {
        assert_eq!(
            yaml(r#"{"yes": "yes", "s": ["1.0", "2026-11-28", "", "a\nb\u001b", "é"], "null": null}"#),
            "\"yes\": \"yes\"\ns:\n  - \"1.0\"\n  - \"2026-11-28\"\n  - \"\"\n  - \"a\\nb\\e\"\n  - \"é\"\n\"null\": null\n"
        );
        let big = "123456789012345678901234567890123456789012";
        assert_eq!(
            yaml(&format!("[-0, 1E5, 0.1, 170141183460469231731687303715884105727, {big}]")),
            format!(
                "- 0\n- 100000.0\n- 0.1\n- 170141183460469231731687303715884105727\n- !<tag:yaml.org,2002:int> \"{big}\"\n"
            )
        );
    }
}
