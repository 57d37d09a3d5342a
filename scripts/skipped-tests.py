#!/usr/bin/env python3
"""Lists the GoogleTest cases that skipped, and why, from ctest's logs of the test outputs.

Usage: scripts/skipped-tests.py LOG...   (ctest's Testing/Temporary/LastTest.log, one per run)

A green run that skipped the fault tests (no network namespaces, no cgroups) must look different
from one that ran them: scripts/test.sh ends with this list. GoogleTest prints a skip as
"file:line: Skipped", the reason on the following lines, then "[  SKIPPED ] Suite.Case".
"""
import re
import sys

skip_line = re.compile(r"^\S+:\d+: Skipped$")
case_line = re.compile(r"^\[  SKIPPED \] (\S+)")
test_name = re.compile(r"^\d+/\d+ Test(?:ing)?: (\S+)")

found = []
for path in sys.argv[1:]:
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as e:
        print(f"skipped-tests: cannot read {path}: {e}", file=sys.stderr)
        continue
    ctest = "?"
    reason = None
    for line in lines:
        m = test_name.match(line)
        if m:
            ctest = m.group(1)
        if skip_line.match(line):
            reason = []
            continue
        m = case_line.match(line)
        if m and reason is not None:
            found.append((ctest, m.group(1), " ".join(r.strip() for r in reason if r.strip())))
            reason = None
            continue
        if reason is not None:
            reason.append(line)

if found:
    print(f"Skipped tests: {len(found)} (these ran green without testing what they are for)")
    for ctest, case, why in found:
        print(f"  {case} ({ctest}): {why or 'no reason given'}")
else:
    print("Skipped tests: none")
