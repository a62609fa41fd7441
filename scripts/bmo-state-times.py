#!/usr/bin/env python3
"""How long BareMetalHosts stayed in each provisioning state, from baremetal-operator's JSON log.

    scripts/bmo-state-times.py BMO_LOG

BMO logs "changing provisioning state" with the host, the old state and the new one each time a host moves on
(its state machine; the provisioner's line of the same message names no old state and is skipped). A host's time
in a state runs from the line that put it there to the line that took it out; a state a host had not left when
the log ends is not counted. Prints one line a state, in the order hosts first left them: how many hosts left
it, the median and the 90th percentile of their seconds, and the slowest.
"""
import collections
import json
import statistics
import sys
from datetime import datetime


def seconds(ts):
    """zap's epoch seconds (BMO's default) or its ISO 8601 time (with -zap-time-encoding=iso8601)."""
    if isinstance(ts, (int, float)):
        return float(ts)
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def state_times(lines):
    """{state: [seconds a host spent in it]}, states in the order hosts first left them."""
    entered = {}
    spent = collections.defaultdict(list)
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            e = json.loads(line[start:])
        except ValueError:
            continue
        if e.get("msg") != "changing provisioning state" or "old" not in e or "new" not in e:
            continue
        host = e.get("baremetalhost")
        if isinstance(host, dict):
            host = f"{host.get('namespace')}/{host.get('name')}"
        t = seconds(e["ts"])
        before = entered.get(host)
        if before is not None and before[0] == e["old"]:
            spent[e["old"]].append(t - before[1])
        entered[host] = (e["new"], t)
    return spent


def percentile(values, p):
    ordered = sorted(values)
    return ordered[round(p * (len(ordered) - 1))]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bmo-state-times.py BMO_LOG")
    with open(sys.argv[1], errors="replace") as f:
        spent = state_times(f)
    if not spent:
        print(f"time in each provisioning state: no state changes in {sys.argv[1]}")
        return
    print("time in each provisioning state (BMO's log): hosts that left it, median, 90th percentile, slowest")
    for state, values in spent.items():
        print(
            f"  {state or '(none)':24s} {len(values):6d}  {statistics.median(values):7.0f} s"
            f"  {percentile(values, 0.9):7.0f} s  {max(values):7.0f} s"
        )


if __name__ == "__main__":
    main()
