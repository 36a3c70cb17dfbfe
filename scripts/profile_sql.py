#!/usr/bin/env python3
"""scripts/profile.sh's inputs and report.

  profile_sql.py DIR           writes the fixture and cycle scripts into DIR
  profile_sql.py --report DIR  prints docs/profile.md from DIR's results

The cycles are the benchmark's (bench/src/contender.rs, bench/sql/baseline_*.sql): the baseline's
claim and fenced finish, as prepared statements with generic plans, and
pg_workfence's functions. Item ids and epochs are 1, 2, 3, ... in claim order
in a fresh fixture, so the single-user scripts can name each token.
"""

import csv
import sys
from pathlib import Path

ITEMS = 3000
WAL_ITEMS = 200
LEASE = "5 minutes"

def bench_sql(name: str) -> str:
    """A statement of the benchmark's baseline (bench/sql/NAME.sql), on one
    line (single-user mode ends a statement at a newline), comments dropped."""
    path = Path(__file__).resolve().parent.parent / "bench" / "sql" / f"{name}.sql"
    lines = path.read_text().splitlines()
    return " ".join(line.strip() for line in lines if line.strip() and not line.startswith("--"))


BASE_CLAIM = bench_sql("baseline_claim")
BASE_FINISH = bench_sql("baseline_finish")
WF_CLAIM = (
    "SELECT c.id, c.epoch FROM workfence.work_claim($1, $2, ($3::text)::interval, $4) AS c"
)
WF_FINISH = "SELECT workfence.work_finish($1, $2, $3)"
WF_CYCLE = (
    "SELECT c.id, c.epoch FROM workfence.work_finish_and_claim("
    "$1, $2, ($3::text)::interval, $4, $5) AS c"
)

CYCLES = {
    "base": "the baseline: claim, then finish (two statements, two commits)",
    "wf": "pg_workfence: work_claim, then work_finish (two statements, two commits)",
    "fused": "pg_workfence: work_finish_and_claim (one statement, one commit)",
}


def single_user(cycle: str, n: int) -> str:
    """A `postgres --single` script: prepare, then n items."""
    claim = f"EXECUTE cl('bench', 'w', '{LEASE}', 1);"
    if cycle == "base":
        lines = [
            "SET plan_cache_mode = force_generic_plan;",
            f"PREPARE cl(text, text, text, int) AS {BASE_CLAIM};",
            f"PREPARE fin(bigint, text, bigint) AS {BASE_FINISH};",
        ]
    else:
        lines = [
            f"PREPARE cl(text, text, text, int) AS {WF_CLAIM};",
            f"PREPARE fin(bigint, text, bigint) AS {WF_FINISH};",
            f"PREPARE cyc(text, text, text, bigint, bigint) AS {WF_CYCLE};",
        ]
    if cycle == "fused":
        lines.append(claim)
        lines += [f"EXECUTE cyc('bench', 'w', '{LEASE}', {i}, {i});" for i in range(1, n + 1)]
    else:
        for i in range(1, n + 1):
            lines += [claim, f"EXECUTE fin({i}, 'w', {i});"]
    return "\n".join(lines) + "\n"


def wal_script(cycle: str) -> str:
    """A psql script: WAL_ITEMS items, then the WAL between, per record type."""
    if cycle == "base":
        prepare = [
            "SET plan_cache_mode = force_generic_plan;",
            f"PREPARE cl(text, text, text, int) AS {BASE_CLAIM};",
            f"PREPARE fin(bigint, text, bigint) AS {BASE_FINISH};",
        ]
    else:
        prepare = [
            f"PREPARE cl(text, text, text, int) AS {WF_CLAIM};",
            f"PREPARE fin(bigint, text, bigint) AS {WF_FINISH};",
            f"PREPARE cyc(text, text, text, bigint, bigint) AS {WF_CYCLE};",
        ]
    claim = f"EXECUTE cl('bench', 'w', '{LEASE}', 1) \\gset"
    lines = prepare + [claim, "SELECT pg_catalog.pg_current_wal_insert_lsn() AS lsn0 \\gset"]
    for _ in range(WAL_ITEMS):
        if cycle == "fused":
            lines.append(f"EXECUTE cyc('bench', 'w', '{LEASE}', :id, :epoch) \\gset")
        else:
            lines += [
                "EXECUTE fin(:id, 'w', :epoch) \\g /dev/null",
                claim,
            ]
    lines.append("SELECT pg_catalog.pg_current_wal_insert_lsn() AS lsn1 \\gset")
    lines.append(
        'SELECT "resource_manager/record_type", count, record_size '
        "FROM public.pg_get_wal_stats(:'lsn0', :'lsn1', true) "
        "WHERE count > 0 ORDER BY record_size DESC;"
    )
    return "\n".join(lines) + "\n"


def write_inputs(work: Path) -> None:
    (work / "fixture-wf.sql").write_text(
        "ALTER SYSTEM SET autovacuum = off;\n"
        "CREATE EXTENSION pg_workfence;\n"
        "SELECT pg_catalog.count(*) FROM (SELECT workfence.work_enqueue('bench', '{}'::jsonb) "
        f"FROM pg_catalog.generate_series(1, {ITEMS})) AS s;\n"
        "VACUUM ANALYZE workfence.items;\n"
    )
    (work / "fixture-base.sql").write_text(
        "INSERT INTO baseline.items (queue, key, payload) "
        "SELECT 'bench', pg_catalog.gen_random_uuid()::text, '{}' "
        f"FROM pg_catalog.generate_series(1, {ITEMS});\n"
        "VACUUM ANALYZE baseline.items;\n"
    )
    for cycle in CYCLES:
        for n in (100, 600):
            (work / f"{cycle}-{n}.sql").write_text(single_user(cycle, n))
        (work / f"wal-{cycle}.sql").write_text(wal_script(cycle))


# Functions whose inclusive cost the report lists, in this order.
FUNCTIONS = [
    ("fmgr_security_definer", "SECURITY DEFINER call (the extension's functions, whole)"),
    ("ProcessGUCArray", "  its pinned search_path: set"),
    ("AtEOXact_GUC", "  its pinned search_path: restore"),
    ("pg_workfence::claim::claim", "  the claim's Rust side, whole"),
    ("pg_workfence::lease::finish", "  the finish's Rust side, whole"),
    ("SPI_execute_plan", "  statements run through SPI"),
    ("standard_ExecutorStart", "executor start-up (every statement, nested included)"),
    ("standard_ExecutorEnd", "executor shut-down"),
    ("ExecInsertIndexTuples", "index entries of the new row versions"),
    ("heap_update", "heap updates"),
    ("CommitTransactionCommand", "commits"),
]


def inclusive(annotate: Path) -> dict:
    """Inclusive instructions per function name from callgrind_annotate."""
    found = {}
    for line in annotate.read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].replace(",", "").isdigit():
            continue
        name = line.split("???:", 1)[-1].split(" [", 1)[0]
        found.setdefault(name, int(parts[0].replace(",", "")))
    return found


def report(work: Path) -> str:
    with open(work / "instructions.csv") as f:
        per_item = {row["cycle"]: int(row["instructions_per_item"]) for row in csv.DictReader(f)}
    base = per_item["base"]
    out = [
        "# Profile: where a claim → finish spends more than hand-written SQL",
        "",
        "Written by `scripts/profile.sh` (counted, not timed: the same on every run of the same",
        "build). Method: its header. PostgreSQL 15, one backend, `synchronous_commit` off, no client.",
        "",
        "## Instructions per item",
        "",
        "| cycle | instructions per item | × baseline |",
        "|---|---:|---:|",
    ]
    for cycle, what in CYCLES.items():
        out.append(f"| {what} | {per_item[cycle]:,} | {per_item[cycle] / base:.2f} |")
    out += [
        "",
        "## Where they go (inclusive, 600 items and the backend's start; same runs)",
        "",
        "| function | " + " | ".join(CYCLES) + " |",
        "|---|" + "---:|" * len(CYCLES),
    ]
    costs = {cycle: inclusive(work / f"annotate.{cycle}.txt") for cycle in CYCLES}
    for name, what in FUNCTIONS:
        cells = []
        for cycle in CYCLES:
            value = costs[cycle].get(name)
            cells.append(f"{value:,}" if value is not None else "-")
        out.append(f"| {what} (`{name}`) | " + " | ".join(cells) + " |")
    out += [
        "",
        f"## WAL per item by record type ({WAL_ITEMS} items, records only)",
        "",
        "| record | " + " | ".join(CYCLES) + " |",
        "|---|" + "---:|" * len(CYCLES),
    ]
    wal = {}
    for cycle in CYCLES:
        rows = {}
        with open(work / f"wal.{cycle}.csv") as f:
            for record, count, size in csv.reader(f):
                rows[record] = (int(count), int(size))
        wal[cycle] = rows
    records = sorted({r for rows in wal.values() for r in rows}, key=lambda r: -wal["wf"].get(r, (0, 0))[1])
    for record in records:
        cells = []
        for cycle in CYCLES:
            count, size = wal[cycle].get(record, (0, 0))
            cells.append(f"{size / WAL_ITEMS:.0f} B ({count / WAL_ITEMS:.2f})" if count else "-")
        out.append(f"| {record} | " + " | ".join(cells) + " |")
    totals = [sum(s for _, s in wal[c].values()) / WAL_ITEMS for c in CYCLES]
    out.append("| **total** | " + " | ".join(f"**{t:.0f} B**" for t in totals) + " |")
    out += [
        "",
        "In brackets: records per item.",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        sys.stdout.write(report(Path(sys.argv[2])))
    elif len(sys.argv) == 2:
        write_inputs(Path(sys.argv[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
