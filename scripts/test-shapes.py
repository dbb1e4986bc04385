#!/usr/bin/env python3
"""Checks the shape of the HTTP and cluster tests (issue 49, item 5), as `make lint` runs it:

- every API family in `node/src/api/` has its test file of the same name in `node/tests/api/`
  (the helpers listed in HELPERS are not families);
- a test over 80 lines is a table (it sends `scenario::Row`s through `run_rows`, or its doc
  comment starts `/// Table`), or a story (its doc comment starts `/// Story`, saying what
  the sequence is: a fault, a race, a hand-over through every node, an attack, a bound, a
  model check, a real SDK's session, a provider's protocol end to end). TO_ROWS listed the
  narratives still to be turned into rows while there were some; it only ever shrank, and is
  empty now.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LONG = 80
HELPERS = {"mod", "context", "batch_slot", "object_writes", "websocket"}

# Endpoint narratives over 80 lines whose cases are still to become `scenario::Row`s (or
# shorter stories). Empty: every long test is a table or a story. A name may only leave it.
TO_ROWS: set = set()

TEST_ATTR = re.compile(r"^\s*#\[(tokio::)?test\b")
FN = re.compile(r"\bfn (\w+)")


def tests_of(path):
    """(name, lines, doc's first line, body) of each test in the file."""
    lines = path.read_text().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if not TEST_ATTR.match(lines[i]):
            i += 1
            continue
        d = i
        while d > 0 and lines[d - 1].lstrip().startswith(("///", "#[")):
            d -= 1
        doc = next((l.strip() for l in lines[d:i] if l.strip().startswith("///")), "")
        j = i
        while not FN.search(lines[j]):
            j += 1
        name = FN.search(lines[j]).group(1)
        indent = len(lines[j]) - len(lines[j].lstrip())
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != " " * indent + "}":
            k += 1
        out.append((name, k - i + 1, doc, "\n".join(lines[j:k + 1])))
        i = k + 1
    return out


def main():
    problems = []
    api_src = ROOT / "node/src/api"
    api_tests = ROOT / "node/tests/api"
    for f in sorted(api_src.glob("*.rs")):
        if f.stem not in HELPERS and not (api_tests / f.name).exists():
            problems.append(f"node/src/api/{f.name} has no node/tests/api/{f.name}")
    files = sorted(api_tests.glob("*.rs")) + sorted((ROOT / "node/tests/cluster").glob("*.rs"))
    seen_long = set()
    for f in files:
        for name, n, doc, body in tests_of(f):
            if n <= LONG:
                continue
            seen_long.add(name)
            table = "run_rows(" in body or doc.startswith("/// Table")
            story = doc.startswith("/// Story")
            if not (table or story or name in TO_ROWS):
                rel = f.relative_to(ROOT)
                problems.append(
                    f"{rel}: {name} has {n} lines: make it a table of scenario rows, or a "
                    f"story (a doc comment starting `/// Story`)"
                )
    for name in sorted(TO_ROWS - seen_long):
        problems.append(f"TO_ROWS names {name}, which is gone or at most {LONG} lines: remove it")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("test shapes hold: every API family has its test file, every long test is a table or a story")


if __name__ == "__main__":
    main()
