#!/usr/bin/env python3
"""CI glue for .ci/run (not part of the product).

  ci-summary.py PHASES TEST_LOG TOTAL_SECONDS   the table of where a run's minutes went: each phase of .ci/run
                                                and scripts/test.sh, each test binary (from cargo test's own
                                                lines), and the phases each end-to-end test prints
                                                (`phase: <test>: <phase>: <seconds> s`)
  ci-summary.py --prune TARGET_DIR STAMP        removes from a kept CARGO_TARGET_DIR what earlier clones built of
                                                the workspace's own crates (older than STAMP; dependencies stay)
                                                and the temporary directories tests left in it
"""
import json
import os
import re
import shutil
import subprocess
import sys

RUNNING = re.compile(r"^\s+Running (.+?) \((.+)\)\s*$")
RESULT = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;.*finished in ([\d.]+)s"
)
E2E_PHASE = re.compile(r"^phase: (.+?): (.+): (\d+) s$")
TEST_OUTPUT = re.compile(r"^---- (.+) std(out|err) ----$")
PANICKED = re.compile(r"^thread '(.+?)' \(\d+\) panicked at (.+):$")
# The end-to-end tests' own lines when their deadline or an assertion ends them (tests/deadline.rs).
E2E_PANICKED = re.compile(r"^([\w-]+): panicked at (.+):$")
E2E_DIAGNOSIS = re.compile(r"^([\w-]+): failed after (\d+) s")
# Lines of a failure's reason shown at the end of the table, and their width: the end of a log is what a
# truncated CI excerpt keeps.
REASON_LINES = 8
REASON_WIDTH = 240
BUDGET = re.compile(r"^budget: (.+?): (NOT RUN.*)$")
# The phase lines of scripts/lib/common.sh: the test binaries that follow ran in that phase.
PHASE = re.compile(r"^== ([\w-]+): ")


def binaries(log_path):
    """[(name, seconds or None, passed, failed, ignored, [(phase, seconds)], script phase)] in the order they ran;
    a binary that ran no test of its phase, said nothing and finished is left out (the appliance phase runs every
    binary with one test's name)."""
    out = []
    script_phase = "test"
    try:
        lines = open(log_path, errors="replace").read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        m = PHASE.match(line)
        if m:
            script_phase = m.group(1)
            continue
        m = RUNNING.match(line)
        if m:
            what, path = m.groups()
            crate = re.sub(r"-[0-9a-f]{16}$", "", os.path.basename(path))
            name = what if what.startswith("tests/") else f"{crate} ({what})"
            out.append([name, None, 0, 0, 0, [], script_phase])
            continue
        m = RESULT.match(line)
        if m and out and out[-1][1] is None:
            _, passed, failed, ignored, secs = m.groups()
            out[-1][1:5] = [float(secs), int(passed), int(failed), int(ignored)]
            continue
        m = BUDGET.match(line)
        if m and out:
            out[-1][5].append((f"{m.group(1)}: {m.group(2)}", None))
            continue
        m = E2E_PHASE.match(line)
        if m and out:
            test, phase, secs = m.groups()
            out[-1][5].append((f"{test}: {phase}", int(secs)))
    return [b for b in out if b[1] is None or sum(b[2:5]) or b[5]]


def reasons(log_path):
    """{test: [lines]}: why each failed test failed, from cargo test's failure sections (the panic's place and
    message, without the backtrace) and the end-to-end tests' own panic and diagnosis lines with the last phase
    such a test finished; those of a test binary that passed (a unit test of the deadline itself) are left out."""
    try:
        lines = open(log_path, errors="replace").read().splitlines()
    except FileNotFoundError:
        return {}
    out, binary = {}, {}
    last_phase = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if RUNNING.match(line):
            out.update(binary)
            binary = {}
        m = RESULT.match(line)
        if m:
            if m.group(1) == "FAILED":
                out.update(binary)
            binary = {}
        m = E2E_PHASE.match(line)
        if m:
            last_phase[m.group(1)] = m.group(2)
        m = PANICKED.match(line) or E2E_PANICKED.match(line)
        if m:
            test = m.group(1)
            why = [f"panicked at {m.group(2)}"]
            i += 1
            while i < len(lines) and len(why) < REASON_LINES:
                nxt = lines[i]
                if nxt.startswith(("stack backtrace:", "note: ", "---- ", "failures:")) or \
                        E2E_DIAGNOSIS.match(nxt) or PANICKED.match(nxt) or RESULT.match(nxt):
                    break
                if nxt.strip():
                    why.append(nxt)
                i += 1
            binary.setdefault(test, why)
            continue
        m = E2E_DIAGNOSIS.match(line)
        if m:
            test = m.group(1)
            after = f"failed after {m.group(2)} s"
            if test in last_phase:
                after += f"; the last phase it finished: {last_phase[test]}"
            binary.setdefault(test, []).append(after)
        i += 1
    out.update(binary)
    return out


def summary(phases_path, log_path, total):
    rows = []
    for line in open(phases_path).read().splitlines():
        name, secs, rc = line.split("\t")
        rows.append((name, int(secs), "ok" if rc == "0" else f"FAILED (exit {rc})"))
    bins = binaries(log_path)
    width = max([len(r[0]) for r in rows] + [len(b[0]) + 2 for b in bins] +
                [len(p) + 4 for b in bins for p, s in b[5] if s is not None] + [5])
    print(f"{'phase':<{width}} {'seconds':>8}  result")
    for name, secs, result in rows:
        print(f"{name:<{width}} {secs:>8}  {result}")
        for b in (b for b in bins if b[6] == name):
            secs = "-" if b[1] is None else f"{b[1]:.0f}"
            result = "no result (the binary did not finish)" if b[1] is None else \
                f"{b[2]} passed, {b[3]} failed" + (f", {b[4]} ignored" if b[4] else "")
            print(f"  {b[0]:<{width - 2}} {secs:>8}  {result}")
            for phase, s in b[5]:
                if s is None:
                    print(f"    {phase}")
                else:
                    print(f"    {phase:<{width - 4}} {s:>8}")
    print(f"{'total':<{width}} {total:>8}")
    skipped = [p for b in bins for p, s in b[5] if s is None]
    for p in skipped:
        print(f"ci: {p}")
    if bins:
        print(f"ci: {sum(b[2] for b in bins)} passed, {sum(b[3] for b in bins)} failed")
    for test, why in reasons(log_path).items():
        print(f"ci: why {test} failed:")
        for line in why[:REASON_LINES]:
            print(f"    {line[:REASON_WIDTH]}")


def prune(target, stamp):
    """The units of the workspace's own packages that this run did not build: their fingerprint directories
    (`.fingerprint/<package>-<hash>`, which no registry crate shares a name with) older than STAMP, and every
    file of deps/ and build/ with such a hash. Registry crates are never touched."""
    since = os.stat(stamp).st_mtime
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"],
        check=True, capture_output=True, text=True).stdout)
    packages = {p["name"] for p in meta["packages"]}
    removed = 0

    def remove(path):
        nonlocal removed
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
        removed += 1

    for profile in ("debug", "release"):
        base = os.path.join(target, profile)
        fingerprints = os.path.join(base, ".fingerprint")
        if not os.path.isdir(fingerprints):
            continue
        stale = set()
        for entry in os.listdir(fingerprints):
            name, _, unit = entry.rpartition("-")
            if name not in packages:
                continue
            path = os.path.join(fingerprints, entry)
            newest = max([os.lstat(os.path.join(path, f)).st_mtime for f in os.listdir(path)] +
                         [os.lstat(path).st_mtime])
            if newest < since:
                stale.add(unit)
                remove(path)
        for sub in ("deps", "build"):
            d = os.path.join(base, sub)
            for entry in os.listdir(d) if os.path.isdir(d) else []:
                unit = entry.split(".", 1)[0].rpartition("-")[2]
                if unit in stale:
                    remove(os.path.join(d, entry))
    for entry in os.listdir(target):
        if entry.startswith(".tmp"):
            remove(os.path.join(target, entry))
    print(f"ci: removed {removed} stale workspace artefacts and test directories from {target}")


if __name__ == "__main__":
    if sys.argv[1] == "--prune":
        prune(sys.argv[2], sys.argv[3])
    else:
        summary(sys.argv[1], sys.argv[2], int(sys.argv[3]))
