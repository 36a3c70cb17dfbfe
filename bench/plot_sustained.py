"""Plot workfence-sustained's figures (sustained.csv) as sustained.png.

Usage: plot_sustained.py CSV PNG. One point per reported minute. Left: items
finished per second (and enqueued, dashed) with the claim latency p99 on a
second axis. Right: the size of workfence.items at each minute's end: the
heap, each index, and pg_total_relation_size.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

INDEX_PREFIX = "index_bytes_"
MB = 1024 * 1024


def number(text):
    """A CSV cell as a float, None when empty (no claim that minute)."""
    return float(text) if text != "" else None


def main(csv_path, png_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_sustained.py: {csv_path} has no rows")
    minutes = [int(r["minute"]) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))

    left.plot(minutes, [number(r["finished_per_s"]) for r in rows], marker="o",
              color="tab:blue", label="finished/s")
    left.plot(minutes, [number(r["enqueued_per_s"]) for r in rows], "--",
              color="tab:blue", alpha=0.5, label="enqueued/s")
    left.set_xlabel("minute")
    left.set_ylabel("items per second")
    rates = [number(r[c]) for r in rows for c in ("finished_per_s", "enqueued_per_s")]
    left.set_ylim(0, max([v for v in rates if v is not None] + [1]) * 1.15)
    left.grid(True, alpha=0.3)
    p99 = left.twinx()
    p99.plot(minutes, [number(r["claim_p99_us"]) for r in rows], marker="s",
             color="tab:red", label="claim p99 (µs)")
    p99.plot(minutes, [number(r["claim_p50_us"]) for r in rows], ":",
             color="tab:red", alpha=0.6, label="claim p50 (µs)")
    p99.set_ylabel("claim latency, µs")
    latencies = [number(r[c]) for r in rows for c in ("claim_p99_us", "claim_p50_us")]
    p99.set_ylim(0, max([v for v in latencies if v is not None] + [1]) * 1.15)
    lines = left.get_legend_handles_labels()
    more = p99.get_legend_handles_labels()
    left.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, ncol=4,
                loc="upper center", bbox_to_anchor=(0.5, -0.12))
    left.set_title("items/s and claim latency per minute")

    right.plot(minutes, [int(r["table_bytes"]) / MB for r in rows], marker="o",
               color="black", label="heap (pg_relation_size)")
    for column in [c for c in rows[0] if c.startswith(INDEX_PREFIX)]:
        right.plot(minutes, [int(r[column]) / MB for r in rows], marker=".",
                   label=column[len(INDEX_PREFIX):])
    right.plot(minutes, [int(r["total_bytes"]) / MB for r in rows], "--",
               color="gray", label="total (pg_total_relation_size)")
    right.set_xlabel("minute")
    right.set_ylabel("MB at the minute's end")
    right.set_ylim(bottom=0)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    right.set_title("workfence.items and its indexes")

    if len(minutes) <= 20:
        for ax in (left, right):
            ax.set_xticks(minutes)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_sustained.py CSV PNG")
    main(sys.argv[1], sys.argv[2])
