#!/usr/bin/env python3
"""Counts the non-test code lines of each Rust file under src: blank lines, comment lines
(`//`, `//!`, `///`) and `#[cfg(test)]` items (a test module or function, to its closing
brace) are not counted. Prints one line per file, largest first, then the db layer and the
total. With --functions, prints each function's code lines instead (`N path:line name`),
largest first; tests/layers.rs holds the limits on both."""
import pathlib
import re
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?fn\s+(\w+)")
# String and character literals on one line, so that the braces inside them are not counted.
LITERALS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')


def counted(text: str) -> list[bool]:
    """For each line of the text, whether it is a code line."""
    flags = []
    skipping = False
    depth = 0
    pending_test = False
    for line in text.splitlines():
        stripped = line.strip()
        flags.append(False)
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
        flags[-1] = bool(stripped) and not stripped.startswith("//")
    return flags


def code_lines(text: str) -> int:
    return sum(counted(text))


def functions(text: str):
    """Each function's name, first line (from 1) and code lines, to its closing brace."""
    lines = text.splitlines()
    flags = counted(text)
    for start, line in enumerate(lines):
        found = FN.match(line)
        if not found or not flags[start]:
            continue
        depth, opened, end = 0, False, start
        for end in range(start, len(lines)):
            code = LITERALS.sub("", lines[end].split("//")[0] if flags[end] else "")
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if (opened and depth <= 0) or (not opened and code.rstrip().endswith(";")):
                break
        yield found.group(1), start + 1, sum(flags[start : end + 1])


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--functions"]
    root = pathlib.Path(args[0] if args else "src")
    if "--functions" in sys.argv[1:]:
        found = [
            (n, f"{path}:{at}", name)
            for path in sorted(root.rglob("*.rs"))
            for name, at, n in functions(path.read_text())
        ]
        for n, place, name in sorted(found, key=lambda f: -f[0]):
            print(f"{n:6} {place} {name}")
        return 0
    counts = {p: code_lines(p.read_text()) for p in sorted(root.rglob("*.rs"))}
    for path, n in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{n:6} {path}")
    db = sum(n for p, n in counts.items() if "db" in p.relative_to(root).parts[:1])
    print(f"{db:6} db layer ({root}/db)")
    print(f"{sum(counts.values()):6} total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
