#!/usr/bin/env python3
"""Draws the long soak's samples (benches/soak/long.rs): relay RSS and the bytes in the
rotating capture directory per 5-s sample, and the p99 (and p50) decision delay per minute.

    python3 scripts/soak-plot.py DIR OUT.png [LIMIT_MIB]
    python3 scripts/soak-plot.py target/soak-long docs/soak-long.png 16

DIR holds samples.csv and minutes.csv as the soak writes them. Needs matplotlib (from PyPI:
`python3 -m venv v && v/bin/pip install matplotlib`). LIMIT_MIB, when given, is drawn on the
disk panel: the rotation's bound on rot/ (2 files x --rotate-keep x --rotate-size).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    limit = float(sys.argv[3]) if len(sys.argv) == 4 else None
    samples = rows(f"{src}/samples.csv")
    minutes = rows(f"{src}/minutes.csv")
    t = [float(r["secs"]) / 60 for r in samples]
    fig, (rss, disk, delay) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)

    rss.plot(t, [int(r["rss_kib"]) / 1024 for r in samples], color="tab:blue", lw=1)
    rss.set_ylabel("relay RSS (MiB)")
    fds = rss.twinx()
    fds.plot(t, [int(r["fds"]) for r in samples], color="tab:gray", lw=0.8, alpha=0.7)
    fds.set_ylabel("open descriptors", color="tab:gray")
    rss.set_ylim(bottom=0)
    fds.set_ylim(bottom=0)

    disk.plot(t, [int(r["disk_bytes"]) / 2**20 for r in samples], color="tab:green", lw=1)
    disk.set_ylabel("rot/ on disk (MiB)")
    if limit is not None:
        disk.axhline(limit, color="tab:green", ls="--", lw=1)
        disk.text(0, limit, " rotation limit", va="bottom", color="tab:green")
    disk.set_ylim(bottom=0)

    m = [int(r["minute"]) + 0.5 for r in minutes]
    delay.plot(m, [float(r["p99_delay_ms"]) for r in minutes], "o-", color="tab:red",
               ms=3, lw=1, label="p99")
    delay.plot(m, [float(r["p50_delay_ms"]) for r in minutes], "o-", color="tab:orange",
               ms=2, lw=0.8, label="p50")
    delay.set_ylabel("decision delay (ms),\nper minute of call end")
    delay.set_ylim(bottom=0)
    delay.legend(loc="upper right")
    delay.set_xlabel("minutes since the load started")

    for ax in (rss, disk, delay):
        ax.axvspan(10, 20, color="tab:blue", alpha=0.06)
        ax.axvspan(max(m) - 9.5, max(m) + 0.5, color="tab:red", alpha=0.06)
        ax.grid(alpha=0.3)
    rss.set_title("windowtap relay, long soak: minutes 10-20 (blue) against the last ten (red)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
