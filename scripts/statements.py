#!/usr/bin/env python3
"""statements.py — the statement snapshot: every SQL statement the application sent to
PostgreSQL during a full run of the integration tests, compared with tests/snapshots/statements.sql.

    scripts/statements.py check  DIR   compare DIR's recording with the snapshot; print a unified
                                       diff and exit 1 when they differ
    scripts/statements.py update DIR   write DIR's recording as the snapshot

DIR is what the test harness wrote with SUBGATE_RECORD_STATEMENTS=DIR (tests/api/support/helpers/
statements.rs): one file per test process, each line a JSON string holding one statement's text
exactly as PostgreSQL received it (a Parse or a simple Query message). The files are merged,
deduplicated and sorted; the snapshot is that list, each statement after a line `-- statement`.
Nothing is normalized but the per-run values of PER_RUN below, and the statements of TIMED below
are always listed: a change of whitespace is a change of what PostgreSQL receives. When a
difference is only of whitespace, the summary says so, so that a moved statement is quickly told
from a changed one. `make test` runs `check` after a full run; `make statements-update` runs the
suite and then `update`. docs/development.md ("The statement snapshot") says how to read a diff.
"""

import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "snapshots" / "statements.sql"
HEADER = """\
-- Every SQL statement the application sends to PostgreSQL during `make test`, exactly as sent
-- (the text of each Parse and simple Query message), sorted. Written by
-- `make statements-update`; never edited by hand. See docs/development.md, "The statement
-- snapshot".
"""
SEPARATOR = "-- statement"

# Statements whose text carries a value that differs from run to run, and the placeholder that
# stands for it in the snapshot. Each pattern matches that one statement whole, so nothing else
# is ever rewritten.
PER_RUN = [
    # The effects listener tells the other processes about this one's commits with a payload of
    # its own, a random token it knows its own notifications back by (src/app/worker/listen.rs).
    (
        re.compile(r"SELECT pg_notify\('subgate_effects', '[0-9a-f]{16}'\)"),
        "SELECT pg_notify('subgate_effects', '<random token>')",
    ),
]


# Statements sent on a timer, which a run records only when some test happens to outlast it
# (a slow machine, say); listed whether this run sent them or not, so the check does not
# depend on timing. A change to one of them shows up when a run records it; change it here too.
TIMED = [
    # The effects listener's probe of its connection, after each PROBE (5 s) of a session that
    # forwarded no commit (src/app/worker/listen.rs).
    "SELECT 1",
]


def normalized(text: str) -> str:
    for pattern, placeholder in PER_RUN:
        if pattern.fullmatch(text):
            return placeholder
    return text


def recorded(directory: Path) -> list[str]:
    """The distinct statements of every recording file in `directory`, sorted."""
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        sys.exit(f"statements: no recording in {directory} (was SUBGATE_RECORD_STATEMENTS set?)")
    seen = set()
    for path in files:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    text = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"statements: {path}:{number}: not a recorded statement ({e})")
                if not isinstance(text, str):
                    sys.exit(f"statements: {path}:{number}: not a recorded statement")
                seen.add(normalized(text))
    return sorted(seen | set(TIMED))


def render(statements: list[str]) -> str:
    parts = [HEADER]
    for text in statements:
        parts.append(f"\n{SEPARATOR}\n{text}\n")
    return "".join(parts)


def squeeze(text: str) -> str:
    return " ".join(text.split())


def check(directory: Path) -> int:
    statements = recorded(directory)
    actual = render(statements)
    (directory / "statements.sql").write_text(actual, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    if actual == expected:
        print(f"statements: {len(statements)} statements, as in {SNAPSHOT.relative_to(ROOT)}")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"{SNAPSHOT.relative_to(ROOT)} (the snapshot)",
            tofile="sent in this run",
        )
    )
    before = set(split(expected))
    after = set(statements)
    gone, new = before - after, after - before
    moved = {squeeze(t) for t in gone} & {squeeze(t) for t in new}
    print(
        f"\nstatements: what PostgreSQL receives differs from the snapshot: {len(gone)} no longer "
        f"sent, {len(new)} new ({len(moved)} of them differ from one no longer sent in whitespace "
        f"only).\nIf every change is meant, take this run as the snapshot: "
        f"scripts/statements.py update {directory} (or make statements-update), and commit it.",
        file=sys.stderr,
    )
    return 1


def split(snapshot: str) -> list[str]:
    """The statements of a rendered snapshot (for the summary; the check compares the text)."""
    chunks = snapshot.split(f"\n{SEPARATOR}\n")[1:]
    return [chunk[:-1] for chunk in chunks]


def update(directory: Path) -> int:
    statements = recorded(directory)
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(render(statements), encoding="utf-8")
    print(f"statements: wrote {len(statements)} statements to {SNAPSHOT.relative_to(ROOT)}")
    return 0


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "update"):
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(sys.argv[2])
    return check(directory) if sys.argv[1] == "check" else update(directory)


if __name__ == "__main__":
    sys.exit(main())
