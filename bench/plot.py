"""Plot scripts/bench.sh's raw figures (benchmarks.csv) as benchmarks.png.

Usage: plot.py CSV PNG. Medians over repetitions, as in benchmarks.md.
Left: workload 1 (one item per claim) by connection count, pg_workfence and
the baseline, synchronous_commit on (solid) and off (dashed), with the peer
queues at their connection count. Right: every workload's median items/s,
pg_workfence next to the baseline (synchronous_commit on), and the peers'
batched configurations (rows of workload 2 with batch 0, "own") above them.
"""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OURS, BASE = "pg_workfence", "baseline SQL"


def medians(path):
    groups = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (int(row["workload"]), row["variant"], int(row["conns"]),
                   row["sync_commit"], int(row["batch"]), row["contender"])
            groups[key].append(float(row["items_per_s"]))
    return {k: statistics.median(v) for k, v in groups.items()}


def main(csv_path, png_path):
    m = medians(csv_path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))

    colors = {OURS: "tab:blue", BASE: "tab:gray"}
    for who in (OURS, BASE):
        for sync, style in (("on", "-"), ("off", "--")):
            pts = sorted((k[2], v) for k, v in m.items()
                         if k[0] == 1 and k[5] == who and k[3] == sync and k[4] == 1)
            if pts:
                left.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                          color=colors[who], label=f"{who}, sync_commit={sync}")
    peer_markers = iter("sD^v<>")
    for peer in sorted({k[5] for k in m if k[0] == 1 and k[4] == 0}):
        marker = next(peer_markers)
        for sync, fill in (("on", None), ("off", "none")):
            pts = [(k[2], v) for k, v in m.items()
                   if k[0] == 1 and k[5] == peer and k[3] == sync]
            if pts:
                left.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=60,
                             facecolors=fill, edgecolors="black" if fill else "tab:red",
                             color="tab:red", label=f"{peer}, sync_commit={sync}")
    left.set_xscale("log", base=2)
    left.set_xlabel("worker connections")
    left.set_ylabel("items/s (median)")
    left.set_title("1. claim -> finish, one item per claim")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7)

    cells = sorted({(k[0], k[1], k[2], k[4]) for k in m
                    if k[0] > 1 and k[3] == "on" and k[4] > 0})
    labels, ours, base = [], [], []
    for w, variant, conns, batch in cells:
        labels.append(f"w{w} {variant or ''} batch={batch} c={conns}".replace("  ", " "))
        ours.append(m.get((w, variant, conns, "on", batch, OURS), 0))
        base.append(m.get((w, variant, conns, "on", batch, BASE), 0))
    # The peers' batched configurations (batch 0: their own batching), one
    # bar each, above pg_workfence's cells.
    peers = sorted((k, v) for k, v in m.items() if k[0] > 1 and k[3] == "on" and k[4] == 0)
    y = range(len(cells))
    right.barh([i + 0.2 for i in y], ours, height=0.4, color=colors[OURS], label=OURS)
    right.barh([i - 0.2 for i in y], base, height=0.4, color=colors[BASE], label=BASE)
    py = range(len(cells), len(cells) + len(peers))
    if peers:
        right.barh(list(py), [v for _, v in peers], height=0.4, color="tab:red",
                   label="peers, batched")
    labels += [f"w{k[0]} {k[5]} batch=own c={k[2]}" for k, _ in peers]
    right.set_yticks(list(y) + list(py))
    right.set_yticklabels(labels, fontsize=7)
    right.set_xlabel("items/s (median), synchronous_commit=on")
    right.set_title("2-5. batches, depth, retained rows, work + renew")
    right.grid(True, axis="x", alpha=0.3)
    right.legend(fontsize=8)

    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py CSV PNG")
    main(sys.argv[1], sys.argv[2])
