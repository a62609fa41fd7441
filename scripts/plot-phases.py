#!/usr/bin/env python3
"""An SVG bar chart of where each node's provisioning time went, for the results log.

    plot-phases.py TABLE OUT.svg [TITLE]

TABLE is the tab-separated table scripts/bench-metal3-nodes.sh prints (tests/metal3_provisioning_bench.rs
writes it): a header line, then per node its name, six phases in seconds (the deploy ramdisk's boot and
its inventory, inspection, cleaning, available to deploying, the deploy, the first boot from disk), the seconds from its
BareMetalHost's creation to ready, and that against the target; lines starting with `#` are notes. Each node is
a bar of its phases one after another, with what the phases leave out of its total (registration, BMO's and
Ironic's waits between them) as the first part, and a line at the 8-minute target. Standard library only, the
same bytes for the same table.
"""
import math
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import svgplot  # noqa: E402
from svgplot import ticks  # noqa: E402

PHASES = ["ramdisk boot and inventory", "inspection", "cleaning", "available to deploying", "deploy", "first boot"]
OTHER = "registration and waits"
COLOURS = ["#bbbbbb", "#1f77b4", "#9467bd", "#2ca02c", "#cccc66", "#ff7f0e", "#d62728"]
TARGET = 480
WIDTH, BAR, GAP = 760, 28, 14
LEFT, RIGHT, TOP, BOTTOM = 110, 20, 40, 120


def read(path):
    """(node, [seconds of each phase], total seconds) a node; a line of another shape is an error."""
    nodes = []
    with open(path, encoding="utf-8") as table:
        lines = [(n, l.rstrip("\n")) for n, l in enumerate(table, 1)]
    rows = [(n, l) for n, l in lines if l.strip() and not l.startswith("#")]
    if not rows or not rows[0][1].startswith("node\t"):
        sys.exit(f"{path}:1: not the per-node table (its header starts with 'node<TAB>')")
    for number, line in rows[1:]:
        cells = line.split("\t")
        if len(cells) != len(PHASES) + 3:
            sys.exit(f"{path}:{number}: {len(cells)} cells, not {len(PHASES) + 3}: {line!r}")
        try:
            seconds = [float(c) for c in cells[1:len(PHASES) + 2]]
        except ValueError:
            sys.exit(f"{path}:{number}: a phase is not a number of seconds: {line!r}")
        if any(math.isnan(s) or s < 0 for s in seconds):
            sys.exit(f"{path}:{number}: a phase was not seen (NaN) or is negative: {line!r}")
        nodes.append((cells[0], seconds[:-1], seconds[-1]))
    if not nodes:
        sys.exit(f"{path}: no nodes")
    return nodes


def plot(nodes, title):
    top = ticks(max(max(total for _, _, total in nodes), TARGET))
    w = WIDTH - LEFT - RIGHT
    height = TOP + len(nodes) * (BAR + GAP) + BOTTOM
    x = lambda s: LEFT + w * s / top[-1]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    axis = TOP + len(nodes) * (BAR + GAP)
    for t in top:
        out.append(f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{axis}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x(t):.1f}" y="{axis + 16}" text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{LEFT + w / 2}" y="{axis + 34}" text-anchor="middle">seconds from the '
               f'BareMetalHost&apos;s creation</text>')
    for i, (name, phases, total) in enumerate(nodes):
        y = TOP + GAP / 2 + i * (BAR + GAP)
        out.append(f'<text x="{LEFT - 6}" y="{y + BAR / 2 + 4:.1f}" text-anchor="end">{escape(name)}</text>')
        start = 0.0
        for colour, seconds in zip(COLOURS, [max(total - sum(phases), 0.0)] + phases):
            out.append(f'<rect x="{x(start):.1f}" y="{y:.1f}" width="{x(start + seconds) - x(start):.1f}" '
                       f'height="{BAR}" fill="{colour}"/>')
            start += seconds
        out.append(f'<text x="{x(start) + 4:.1f}" y="{y + BAR / 2 + 4:.1f}">{total:.0f} s</text>')
    out.append(f'<line x1="{x(TARGET):.1f}" y1="{TOP - 4}" x2="{x(TARGET):.1f}" y2="{axis}" '
               f'stroke="#d62728" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{x(TARGET):.1f}" y="{TOP - 8}" text-anchor="middle" fill="#d62728">'
               f'target {TARGET} s</text>')
    for i, (name, colour) in enumerate(zip([OTHER] + PHASES, COLOURS)):
        lx, ly = LEFT + (i % 3) * 200, axis + 56 + (i // 3) * 18
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    svgplot.main("plot-phases.py TABLE OUT.svg [TITLE]", read, plot, "where each node's provisioning time went")
