#!/usr/bin/env python3
"""Writes the output of `scripts/docs-examples.sh` (read on stdin) into the example blocks of
docs/commands/*.md: each `$ state-store …` line of a ```console block gets the output that
command printed in this run, up to the next command of the block.

Examples that the script ran but a page does not show, and examples a page shows but the script
no longer runs, are listed on stderr, and the exit code is 1, so a page never silently drifts
from the binary. Run it from the repository's top directory:

    ./scripts/docs-examples.sh --write
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PAGE = re.compile(r"^######## (docs/commands/\S+\.md)$")


def is_command(line: str) -> bool:
    return line.startswith("$ ") and line != "$ echo $?"


def examples(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(command, output lines) for each command among `lines`, trailing blank lines dropped."""
    found: list[tuple[str, list[str]]] = []
    for line in lines:
        if is_command(line):
            found.append((line, []))
        elif found:
            found[-1][1].append(line)
    for _, output in found:
        while output and not output[-1].strip():
            output.pop()
    return found


def parse_run(text: str) -> dict[str, list[tuple[str, list[str]]]]:
    pages: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = PAGE.match(line)
        if m:
            current = pages.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return {page: examples(lines) for page, lines in pages.items()}


def rewrite(path: Path, ran: list[tuple[str, list[str]]]) -> tuple[list[str], list[str]]:
    """Rewrites the page; returns the commands it lacks and those the run lacks."""
    outputs: dict[str, list[list[str]]] = {}
    for command, output in ran:
        outputs.setdefault(command, []).append(output)
    lines = path.read_text().split("\n")
    out: list[str] = []
    shown: list[str] = []
    stale: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.strip() != "```console":
            continue
        end = next(j for j in range(i, len(lines)) if lines[j].strip() == "```")
        block = lines[i:end]
        for n, (command, old) in enumerate(examples(block)):
            if n:
                out.append("")
            shown.append(command)
            fresh = outputs.get(command)
            if fresh:
                out.append(command)
                out.extend(fresh.pop(0))
            else:
                stale.append(command)
                out.append(command)
                out.extend(old)
        i = end
    path.write_text("\n".join(out))
    missing = [command for command, _ in ran if command not in shown]
    return missing, stale


def main() -> int:
    run = parse_run(sys.stdin.read())
    drift = False
    for page, ran in sorted(run.items()):
        missing, stale = rewrite(Path(page), ran)
        for command in missing:
            print(f"{page}: not on the page: {command}", file=sys.stderr)
        for command in stale:
            print(f"{page}: not run by scripts/docs-examples.sh: {command}", file=sys.stderr)
        drift = drift or bool(missing or stale)
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main())
