"""What the results log's plot scripts share (scripts/plot-*.py): round axis ticks and a whole-or-nothing write."""
import os
import sys


def ticks(top, count=5):
    """Round tick values from 0 to at least `top`."""
    step = 1
    while step * count < top:
        for factor in (2, 5, 10):
            if step * factor * count >= top:
                step *= factor
                break
        else:
            step *= 10
    return [step * i for i in range(count + 1)]


def write(path, text):
    """`text` into `path` whole or not at all: a temporary file, synced, renamed, the directory synced."""
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def main(usage, read, plot, default_title):
    """A plot script's command line: `usage` is `NAME INPUT OUT.svg [TITLE]`; `read` takes the input's path,
    `plot` what it read and the title."""
    if len(sys.argv) not in (3, 4):
        sys.exit(f"usage: {usage}")
    data = read(sys.argv[1])
    title = sys.argv[3] if len(sys.argv) == 4 else default_title
    write(sys.argv[2], plot(data, title))
