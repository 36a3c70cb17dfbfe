"""The demo as scripts/demo.sh runs it (scripts/test.sh, tier 10b; CONTRIBUTING.md).

`examples/python/.venv/bin/python demo/test_demo.py`: runs demo/demo.py on a throwaway cluster
directory under `$WORKFENCE_SCRATCH`, then the dashboard (`target/release/workfence-ui`, which
scripts/test.sh builds, or `$WORKFENCE_UI_EXE`; scripts/demo.sh builds the same crate with the
`demo` profile) against the cluster the demo left up, as scripts/demo.sh starts it, and
checks, apart from what the demo checks itself:
- the exit status 0 and the verdict PASS;
- the business table: exactly one row per invoice, with the item's final epoch, and that epoch
  newer than the one the stopped worker claimed with (the demo printed both);
- the provider's deliveries: one accepted attempt per message, with the item's final epoch, and
  the stopped worker's late send among the rejected ones;
- the dashboard's queues page: `refused` 3 and `lapsed` 3 for both queues (a server that did not
  count would show '—').
Needs the extension installed into Debian's PostgreSQL 15 and the dashboard built (`cargo build
--release -p workfence-ui`). The cluster is stopped at the end and its directory removed, unless a
check failed (then it is left for inspection, its server log in it).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import unittest
import urllib.request
from pathlib import Path

import psycopg

import demo

UI_EXE = Path(
    os.environ.get("WORKFENCE_UI_EXE") or demo.REPO / "target" / "release" / "workfence-ui"
)


def scratch() -> Path:
    """Where the cluster goes: `$WORKFENCE_SCRATCH` (which the postgres OS user must reach when
    the test runs as root), else target/."""
    return Path(os.environ.get("WORKFENCE_SCRATCH") or demo.REPO / "target")


def cell(page: str, queue: str, column: str) -> str:
    """The text of the cell `<td class="num {column}">` in the row of `queue` of the queues
    page (tags inside it dropped)."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', page, re.S)
    if row is None:
        raise AssertionError(f"the queues page has no row for {queue}:\n{page}")
    found = re.search(rf'<td class="num {column}">(.*?)</td>', row.group(1), re.S)
    if found is None:
        raise AssertionError(f"the row of {queue} has no {column} cell: {row.group(1)}")
    return html.unescape(re.sub(r"<[^>]*>", "", found.group(1))).strip()


class DemoTest(unittest.TestCase):
    """The demo, its tables, and the dashboard watching it."""

    def test_the_demo_holds_and_its_dashboard_shows_the_refusals_and_lapses(self) -> None:
        """Run the demo and the dashboard as scripts/demo.sh does; check what they show."""
        self.assertTrue(
            UI_EXE.is_file(), f"{UI_EXE} not found: cargo build --release -p workfence-ui"
        )
        data_dir = scratch() / f"demo-test-{os.getpid()}"
        cluster = demo.Cluster(data_dir, Path(demo.run([demo.PG_CONFIG, "--bindir"], "").strip()))
        failed = True
        try:
            env = {k: v for k, v in os.environ.items() if k != "WORKFENCE_PG_CONFIG"}
            out = subprocess.run(
                [sys.executable, str(demo.HERE / "demo.py"), "--dir", str(data_dir)],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=300,
            )
            said = f"{out.stdout}\n{out.stderr}"
            self.assertEqual(
                out.returncode, 0, f"demo/demo.py exited with {out.returncode}:\n{said}"
            )
            self.assertIn("VERDICT: PASS", out.stdout, said)
            self.assertIn("pg_workfence preloaded", out.stdout, said)
            # The port of the cluster the demo left up: line 4 of postmaster.pid.
            cluster.port = int((data_dir / "postmaster.pid").read_text().splitlines()[3])

            # The epochs the stopped worker A claimed with, as the demo printed them.
            a_epochs = {
                int(i): int(e)
                for i, e in re.findall(r"^A \|\s+claim id=(\d+) epoch=(\d+)", out.stdout, re.M)
            }
            self.assertEqual(len(a_epochs), 6, f"A claimed three items in each part:\n{said}")

            with psycopg.connect(cluster.dsn(demo.DATABASE), autocommit=True) as app:
                items = {
                    key: (item_id, epoch)
                    for item_id, key, epoch in app.execute(
                        "SELECT id, key, epoch FROM workfence.items WHERE state = 'done'"
                    ).fetchall()
                }
                for key in demo.KEYS["invoices"]:
                    item_id, epoch = items[key]
                    rows = app.execute(
                        "SELECT epoch FROM demo.invoices_sent WHERE invoice = %s", (key,)
                    ).fetchall()
                    self.assertEqual([r[0] for r in rows], [epoch], f"demo.invoices_sent of {key}")
                    self.assertGreater(epoch, a_epochs[item_id], f"{key}: B's epoch above A's")
            with psycopg.connect(cluster.dsn(demo.PROVIDER), autocommit=True) as provider:
                late = 0
                for key in demo.KEYS["messages"]:
                    item_id, epoch = items[key]
                    attempts = provider.execute(
                        "SELECT epoch, accepted FROM provider.attempts"
                        " WHERE message = %s ORDER BY n",
                        (key,),
                    ).fetchall()
                    self.assertEqual(
                        [e for e, ok in attempts if ok], [epoch], f"deliveries of {key}: {attempts}"
                    )
                    late += sum(1 for e, ok in attempts if not ok and e == a_epochs[item_id])
                    delivered = provider.execute(
                        "SELECT epoch FROM provider.deliveries WHERE message = %s", (key,)
                    ).fetchall()
                    self.assertEqual(
                        [r[0] for r in delivered], [epoch], f"provider.deliveries of {key}"
                    )
                self.assertEqual(late, 1, "A's one late send, rejected")

            # The dashboard, as scripts/demo.sh starts it.
            ui = subprocess.Popen(
                [
                    str(UI_EXE),
                    "--dsn",
                    f"host=127.0.0.1 port={cluster.port} user=postgres dbname={demo.DATABASE}",
                    "--listen",
                    "127.0.0.1:0",
                ],
                env={k: v for k, v in os.environ.items() if k != "WORKFENCE_UI_BASIC_AUTH"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert ui.stdout is not None
                line = ui.stdout.readline()
                prefix = "workfence-ui listening on http://"
                self.assertTrue(line.startswith(prefix), f"workfence-ui printed {line!r}")
                authority = line.strip()[len(prefix) :].rstrip("/")
                with urllib.request.urlopen(f"http://{authority}/", timeout=60) as response:
                    self.assertEqual(response.status, 200)
                    page = response.read().decode()
                for queue in demo.KEYS:
                    self.assertEqual(
                        (cell(page, queue, "refused"), cell(page, queue, "lapsed")),
                        ("3", "3"),
                        f"the queues page's refused and lapsed of {queue}"
                        " ('—': not counted, the library not preloaded)",
                    )
            finally:
                ui.terminate()
                ui.wait(timeout=30)
                if ui.stdout is not None:
                    ui.stdout.close()
            failed = False
        finally:
            cluster.stop()
            if failed:
                print(f"the demo cluster is left in {data_dir} for inspection", file=sys.stderr)
            else:
                subprocess.run(["rm", "-rf", "--", str(data_dir)], check=True)


if __name__ == "__main__":
    unittest.main()
