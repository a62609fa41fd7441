#!/usr/bin/env python3
"""An SVG line chart of a benchmark's progress log, for the results log.

    plot-progress.py PROGRESS_LOG OUT.svg [TITLE]

PROGRESS_LOG has one sample a line, as scripts/bench-metal3-scale.sh writes it:
`<seconds> s: <state>=<count> <state>=<count> … mem <MiB> MiB`. The chart has a line per state (hosts in it
over time) and, on its own axis, the memory used. Standard library only: the SVG is written by hand, the same
bytes for the same log.
"""
import os
import re
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import svgplot  # noqa: E402
from svgplot import ticks  # noqa: E402

SAMPLE = re.compile(r"^(\d+) s: (.*?)\s*mem (\d+) MiB$")
# A state's colour: the order BMO moves a host through its states.
ORDER = ["registering", "inspecting", "preparing", "available", "provisioning", "provisioned"]
COLOURS = ["#999999", "#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#d62728", "#8c564b", "#e377c2"]
WIDTH, HEIGHT = 720, 400
LEFT, RIGHT, TOP, BOTTOM = 60, 150, 40, 50


def read(path):
    """The samples of the log: (seconds, {state: count}, MiB) each; a line of another shape is an error."""
    samples = []
    with open(path, encoding="utf-8") as log:
        for number, line in enumerate(log, 1):
            line = line.strip()
            if not line:
                continue
            m = SAMPLE.match(line)
            if not m:
                sys.exit(f"{path}:{number}: not a progress sample: {line!r}")
            counts = {}
            for pair in m.group(2).split():
                state, _, count = pair.rpartition("=")
                if not state or not count.isdigit():
                    sys.exit(f"{path}:{number}: not a state=count pair: {pair!r}")
                counts[state] = int(count)
            samples.append((int(m.group(1)), counts, int(m.group(3))))
    if not samples:
        sys.exit(f"{path}: no samples")
    return samples


def plot(samples, title):
    states = sorted({s for _, c, _ in samples for s in c},
                    key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))
    t_ticks = ticks(max(t for t, _, _ in samples))
    n_ticks = ticks(max([c for _, counts, _ in samples for c in counts.values()] or [1]))
    m_ticks = ticks(max(m for _, _, m in samples))
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x = lambda t: LEFT + w * t / t_ticks[-1]
    y = lambda n, top: TOP + h - h * n / top
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for t in t_ticks:
        out.append(f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{TOP + h}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x(t):.1f}" y="{TOP + h + 16}" text-anchor="middle">{t}</text>')
    for n in n_ticks:
        out.append(f'<line x1="{LEFT}" y1="{y(n, n_ticks[-1]):.1f}" x2="{LEFT + w}" '
                   f'y2="{y(n, n_ticks[-1]):.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(n, n_ticks[-1]) + 4:.1f}" text-anchor="end">{n}</text>')
    for m in m_ticks:
        out.append(f'<text x="{LEFT + w + 6}" y="{y(m, m_ticks[-1]) + 4:.1f}" fill="#555555">{m}</text>')
    out.append(f'<text x="{LEFT + w / 2}" y="{HEIGHT - 12}" text-anchor="middle">seconds</text>')
    out.append(f'<text x="14" y="{TOP + h / 2}" transform="rotate(-90 14 {TOP + h / 2})" '
               f'text-anchor="middle">hosts</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#333333"/>')
    series = [(s, COLOURS[i % len(COLOURS)], [(t, c.get(s, 0)) for t, c, _ in samples], n_ticks[-1], "")
              for i, s in enumerate(states)]
    series.append(("memory (MiB, right)", "#555555", [(t, m) for t, _, m in samples], m_ticks[-1],
                   ' stroke-dasharray="4 3"'))
    for i, (name, colour, points, top, dash) in enumerate(series):
        path = " ".join(f"{x(t):.1f},{y(v, top):.1f}" for t, v in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
        ly = TOP + 14 + 18 * i
        lx = LEFT + w + 48
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 16}" y2="{ly - 4}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 20}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    svgplot.main("plot-progress.py PROGRESS_LOG OUT.svg [TITLE]", read, plot, "hosts in each state over time")
