"""What the results log's plot scripts share (scripts/plot-*.py): round axis ticks and a whole-or-nothing write."""
import os


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
