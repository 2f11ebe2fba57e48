"""Stock levels per warehouse."""

import csv


def load(path):
    # TODO: stream the file instead of reading it whole
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def low_stock(rows, threshold=10):
    # FIXME: threshold should come from configuration
    return [r for r in rows if int(r["count"]) < threshold]
