#!/usr/bin/env python3
"""Counts the non-test code lines of each Rust file under src: blank lines, comment lines
(`//`, `//!`, `///`) and `#[cfg(test)]` items (a test module or function, to its closing
brace) are not counted. Prints one line per file, largest first, then the db layer and the
total."""
import pathlib
import sys


def code_lines(text: str) -> int:
    count = 0
    skipping = False
    depth = 0
    pending_test = False
    for line in text.splitlines():
        stripped = line.strip()
        if skipping:
            depth += stripped.count("{") - stripped.count("}")
            if depth <= 0 and "}" in stripped:
                skipping = False
            continue
        if stripped.startswith(("#[cfg(test)]", "#[cfg(all(test")):
            pending_test = True
            continue
        if pending_test:
            if stripped.startswith("#[") or not stripped:
                continue
            pending_test = False
            depth = stripped.count("{") - stripped.count("}")
            skipping = depth > 0 or not stripped.endswith(";")
            if depth <= 0 and "{" in stripped:
                skipping = False
            continue
        if not stripped or stripped.startswith("//"):
            continue
        count += 1
    return count


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    counts = {p: code_lines(p.read_text()) for p in sorted(root.rglob("*.rs"))}
    for path, n in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{n:6} {path}")
    db = sum(n for p, n in counts.items() if "db" in p.relative_to(root).parts[:1])
    print(f"{db:6} db layer ({root}/db)")
    print(f"{sum(counts.values()):6} total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
