"""The values and keys both directions of the tier write: the corners of Python's `json.dumps`
(escapes, surrogate pairs, float repr, big integers, empty containers) and keys with the
characters that break naive quoting or URL handling."""

from __future__ import annotations

import json

#: (case id, the value as typed on our command line). The Python value is `json.loads(text)`,
#: and what Airflow stores for it is `json.dumps` of that value.
VALUES: list[tuple[str, str]] = [
    ("nested", '{"run": {"attempts": [1, 2, {"ok": true, "error": null}]}, "tags": ["a", "b"], "done": false}'),
    ("non_ascii", '"café — naïve — 中文 — Ελληνικά — עברית"'),
    ("astral", '"😀 𝄞 🏳️‍🌈 𠜎"'),
    ("escaped_input", '"caf\\u00e9 \\ud83d\\ude00 \\/ \\b\\f"'),
    ("controls", '"line\\nbreak\\ttab\\r\\u0000nul\\u001funit\\u007fdel\\u2028ls\\\\back\\"quote</script>"'),
    ("floats", "[0.1, 1e16, 1E+16, 1e-5, 1.0, -0.0, 0.30000000000000004, 5e-324, 1.7976931348623157e308, "
               "123456789.123456789, 1e22, 1e15, 100.0, 2.5e-7, 1.5e300, -1e-300, 12345678901234567890.0]"),
    ("float_scalar", "1e+16"),
    ("small_float", "1e-05"),
    ("big_integers", "[123456789012345678901234567890, -9223372036854775809, 18446744073709551616, "
                     "9007199254740993, 0, -1]"),
    ("big_integer_scalar", "-340282366920938463463374607431768211457"),
    ("empties", '["", [], {}, [[]], {"": ""}, [{}]]'),
    ("empty_string", '""'),
    ("empty_list", "[]"),
    ("empty_object", "{}"),
    ("duplicate_keys", '{"a": 1, "b": 2, "a": 3}'),
    ("compact_input", '{"a":[1,2],"b":{"c":"d"}}'),
    ("spacious_input", ' \n\t[ 1 ,\n 2 ]\r\n '),
    ("true", "true"),
    ("negative", "-5"),
    ("string", '"2026-11-29T00:00:00Z"'),
    ("deep", "[" * 200 + "]" * 200),
    ("key_order", '{"z": 1, "a": 2, "m": {"y": 1, "b": 2}}'),
    ("long", json.dumps("x" * 60000)),
]

#: Keys, stored and matched literally (Airflow's key is `String(512)`; `/` is allowed).
KEYS: list[tuple[str, str]] = [
    ("slashes", "checkpoint/path/part-0001"),
    ("leading_slash", "/abs"),
    ("trailing_slash", "dir/"),
    ("double_quote", 'say "hi"'),
    ("single_quote", "it's"),
    ("spaces", "with spaces  and\ttab"),
    ("percent_and_like", "100%_done\\ok"),
    ("sql", "'; DROP TABLE task_state_store; --"),
    ("non_ascii", "clé-ключ-鍵"),
    ("url", "s3://bucket/key?x=1&y=2#frag"),
    ("dots", "../.."),
    ("longest", "k" * 512),
]

#: Keys some databases compare as equal: MySQL's PAD SPACE collations ignore trailing blanks,
#: and a `_ci` collation (an upgraded MySQL metastore) ignores case and accents too.
NEAR_KEYS: list[str] = ["pad", "pad ", "pad  ", "Pad", "café", "cafe\u0301", "tab\t"]


def python_value(text: str):
    return json.loads(text)


def airflow_text(text: str) -> str:
    """What Airflow stores for the value: `json.dumps` with Python's defaults."""
    return json.dumps(json.loads(text))
