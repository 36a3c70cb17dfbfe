"""`demo/demo.py [--dir DIR]`: pg_workfence's demo, two real worker processes on the Python library.

Run by scripts/demo.sh with the Python of examples/python/.venv (psycopg and the `workfence`
library, clients/python). Starts a throwaway PostgreSQL 15 cluster in DIR (default
`$WORKFENCE_DEMO_DIR`, else `<repo>/.demo/cluster`; a previous demo cluster there is stopped and
replaced) that preloads the library, so that `work_queue_stats.refused` and `.lapsed` (the
dashboard's columns) count. Two worker processes, A and B, run demo/worker.py with the SAME owner
name, as two processes on one host named after it would. In each part A claims three items and
stops (SIGSTOP, at the stall point of demo/worker.py) while it holds them; its leases lapse by
the server's clock; B claims them anew and does the jobs; A is resumed (SIGCONT) and every call it
makes under its old tokens is refused:

1. `invoices`: the job writes a row of the business table `demo.invoices_sent` in its fenced
   transaction. A stops before its write; afterwards the table has exactly one row per invoice,
   each carrying the item's final epoch (B's).
2. `messages`: the job sends to an outside system (the database `provider`, which keeps the
   highest epoch per message and rejects older ones) right after checking its lease. A stops
   between that check and the send; its late send is rejected: exactly one delivery per message.

The cluster's `workfence.notify_lease_lost` is off, so that the stopped worker learns of each
loss the way every worker must be ready to, from a refused call (which the counters count); with
the hint on it could drop its items without a call. Prints each step as it happens and a verdict,
and leaves the cluster running with how to reach it. Exits 0 when both parts hold, 1 when one
does not, 2 when the demo could not run.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    import psycopg
    from psycopg.types.json import Jsonb
except ImportError as missing:  # the demo's venv is examples/python/.venv
    print(
        f"demo/demo.py needs psycopg ({missing}): run it with examples/python/.venv/bin/python"
        " (examples/python/install.sh makes it; scripts/demo.sh does both)",
        file=sys.stderr,
    )
    sys.exit(2)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PG_CONFIG = "/usr/lib/postgresql/15/bin/pg_config"
HOST = "127.0.0.1"
SUPERUSER = "postgres"
#: The application's database (the dashboard's too) and the outside system's.
DATABASE = "workfence_demo"
PROVIDER = "provider"
#: What each part's three items are called, by queue.
KEYS = {
    "invoices": ["inv-1001", "inv-1002", "inv-1003"],
    "messages": ["msg-2001", "msg-2002", "msg-2003"],
}
#: How long the demo waits for any one thing a worker should say, in seconds.
WAIT = 60.0
#: A claim as the library logs it.
CLAIM = r"^claim id=(?P<id>\d+) epoch=(?P<epoch>\d+)"
#: The longest Unix socket path (sun_path less its NUL).
MAX_SOCKET_PATH = 107

APP_SCHEMA = r"""
CREATE EXTENSION pg_workfence;
CREATE SCHEMA demo;
-- The business table. No unique key on purpose: the fencing, not a constraint, keeps it to one
-- row per invoice.
CREATE TABLE demo.invoices_sent (
    invoice    text        NOT NULL,
    epoch      bigint      NOT NULL,
    worker_pid integer     NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- What the messages job recorded, in its fenced transaction: accepted, rejected, or not sent.
CREATE TABLE demo.messages_sent (
    message     text        NOT NULL,
    epoch       bigint      NOT NULL,
    outcome     text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

# The outside system, standing in for a provider's API: it keeps the highest epoch it accepted
# per message and rejects older ones; an equal epoch is the same holder retrying (accepted).
# docs/writing-workers.md, *Fencing writes to other systems with the epoch*.
PROVIDER_SCHEMA = r"""
CREATE SCHEMA provider;
CREATE TABLE provider.deliveries (
    message      text        PRIMARY KEY,
    epoch        bigint      NOT NULL,
    body         text        NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE provider.attempts (
    n        bigserial   PRIMARY KEY,
    message  text        NOT NULL,
    epoch    bigint      NOT NULL,
    accepted boolean     NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION provider.deliver(p_message text, p_epoch bigint, p_body text,
                                 OUT accepted boolean, OUT held_epoch bigint)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO provider.deliveries AS d (message, epoch, body)
    VALUES (p_message, p_epoch, p_body)
    ON CONFLICT (message) DO UPDATE
        SET epoch = excluded.epoch, body = excluded.body, delivered_at = clock_timestamp()
        WHERE d.epoch <= excluded.epoch;      -- no row written: a newer holder sent first
    accepted := FOUND;
    SELECT d.epoch INTO held_epoch FROM provider.deliveries AS d WHERE d.message = p_message;
    INSERT INTO provider.attempts (message, epoch, accepted) VALUES (p_message, p_epoch, accepted);
END
$$;
"""


class CouldNotRun(Exception):
    """The demo could not run (exit 2): the cluster, a tool, a worker that died."""


class DidNotHold(Exception):
    """A step of the scenario did not happen as it must (exit 1)."""


def say(tag: str, text: str) -> None:
    """Print one step: a short tag, then what happened."""
    print(f"{tag:<9} {text}", flush=True)


# ----------------------------------------------------------------------------------- cluster


def as_server_user(argv: list[str]) -> list[str]:
    """`argv` run as the `postgres` OS user when we are root (PostgreSQL refuses root)."""
    return ["runuser", "-u", SUPERUSER, "--", *argv] if os.geteuid() == 0 else argv


def run(argv: list[str], what: str) -> str:
    """Run a program; its output, or `CouldNotRun` with the output when it fails."""
    try:
        # From /: the postgres OS user may not enter the caller's directory.
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
    except OSError as error:
        raise CouldNotRun(f"{what}: {error}") from error
    if done.returncode != 0:
        raise CouldNotRun(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """The demo's cluster: its directory, the server's bin directory, its port once started."""

    data_dir: Path
    bin_dir: Path
    port: int = 0

    def running(self) -> bool:
        """Whether a server runs in the directory (`pg_ctl status`)."""
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        argv = as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status"])
        return subprocess.run(argv, capture_output=True, check=False, cwd="/").returncode == 0

    def stop(self) -> None:
        """Stop the server (fast shutdown) if it runs."""
        if self.running():
            pg_ctl = str(self.bin_dir / "pg_ctl")
            run(
                as_server_user([pg_ctl, "-D", str(self.data_dir), "-w", "-m", "fast", "stop"]),
                "pg_ctl stop",
            )

    def create(self) -> bool:
        """A new cluster in the directory (a previous one stopped and removed); true when it
        replaced one. Preloads the library, turns the lease-lost notifications off (see the
        module's docstring), listens on 127.0.0.1 only."""
        replaced = self.data_dir.exists()
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, SUPERUSER, SUPERUSER)
        initdb = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-A",
            "trust",
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
            "--no-instructions",
        ]
        run(as_server_user(initdb), "initdb")
        socket_dir = str(self.data_dir) if len(str(self.data_dir)) + 20 <= MAX_SOCKET_PATH else ""
        settings = (
            "\n# scripts/demo.sh (demo/demo.py)\n"
            "shared_preload_libraries = 'pg_workfence'\n"
            "workfence.notify_lease_lost = off\n"
            f"listen_addresses = '{HOST}'\n"
            f"unix_socket_directories = '{socket_dir}'\n"
            "fsync = off\n"
        )
        conf = self.data_dir / "postgresql.conf"
        with open(conf, "a", encoding="utf-8") as f:
            f.write(settings)
        return replaced

    def start(self) -> None:
        """Start the server on a free port (another one if that was taken meanwhile)."""
        log = self.data_dir / "server.log"
        last = ""
        for _ in range(5):
            port = free_port()
            argv = as_server_user(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-w",
                    "-l",
                    str(log),
                    "-o",
                    f"-p {port}",
                    "start",
                ]
            )
            done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
            if done.returncode == 0:
                self.port = port
                return
            last = log.read_text(errors="replace")[-2000:] if log.exists() else done.stderr
            if "already in use" not in last:
                break
        raise CouldNotRun(f"the demo cluster in {self.data_dir} did not start:\n{last}")

    def dsn(self, database: str) -> str:
        """The libpq connection string of `database`, as the superuser, over TCP."""
        return f"host={HOST} port={self.port} user={SUPERUSER} dbname={database}"

    def stop_command(self) -> str:
        """How to stop the cluster by hand."""
        cmd = f"{self.bin_dir / 'pg_ctl'} -D {self.data_dir} -m fast stop"
        return f"runuser -u {SUPERUSER} -- {cmd}" if os.geteuid() == 0 else cmd


# ----------------------------------------------------------------------------------- workers


@dataclass
class WorkerProc:
    """One worker process (demo/worker.py): its output read line by line on a thread, and
    printed as the demo consumes it, prefixed with the worker's name."""

    name: str
    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    ended: bool = False

    @classmethod
    def start(
        cls, name: str, queue_name: str, owner: str, cluster: Cluster, stall: str
    ) -> WorkerProc:
        """Start demo/worker.py for `queue_name` with `owner`, stalling at `stall` (or not)."""
        env = dict(os.environ)
        env.update(
            WORKFENCE_DSN=cluster.dsn(DATABASE),
            WORKFENCE_PROVIDER_DSN=cluster.dsn(PROVIDER),
            WORKFENCE_QUEUE=queue_name,
            WORKFENCE_OWNER=owner,
            WORKFENCE_DEMO_STALL=stall,
            PYTHONUNBUFFERED="1",
        )
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py")],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        worker = cls(name, proc)
        threading.Thread(target=worker._read, name=f"read-{name}", daemon=True).start()
        return worker

    def _read(self) -> None:
        """Hand every output line to the queue; None at the end."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, matches: Callable[[str], bool], what: str, timeout: float = WAIT) -> str:
        """Print the worker's lines until one `matches`, which is returned. `DidNotHold` when
        `timeout` seconds pass first; `CouldNotRun` when the process ends first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.0))
            except queue.Empty:
                raise DidNotHold(f"{self.name} did not log {what} within {timeout:.0f} s") from None
            if line is None:
                self.ended = True
                raise CouldNotRun(
                    f"worker {self.name} ended (exit {self.proc.wait()}) before {what}"
                )
            print(f"{self.name} |      {line}", flush=True)
            if matches(line):
                return line

    def expect_all(
        self, what: str, *wanted: tuple[str, Iterable[int]]
    ) -> list[dict[int, re.Match[str]]]:
        """Print the worker's lines until each pattern of `wanted` (a regex whose group `id` is an
        item's id, and the ids it must match) has matched once for each of its ids, in whatever
        order the lines come; the matches of each pattern, by id."""
        regexes = [(re.compile(pattern), set(ids)) for pattern, ids in wanted]
        found: list[dict[int, re.Match[str]]] = [{} for _ in regexes]

        def matches(line: str) -> bool:
            for (regex, ids), got in zip(regexes, found, strict=True):
                m = regex.search(line)
                if m and int(m.group("id")) in ids:
                    got.setdefault(int(m.group("id")), m)
            return all(ids <= got.keys() for (_, ids), got in zip(regexes, found, strict=True))

        self.expect(matches, what)
        return found

    def stopped(self) -> None:
        """Wait until the process is stopped by its own SIGSTOP (waitpid with WUNTRACED)."""
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise CouldNotRun(f"worker {self.name} ended instead of stopping (status {status})")

    def end(self) -> None:
        """SIGTERM (resuming it first, were it stopped), then wait for it to exit, printing the
        rest of its output."""
        if self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            while not self.ended:
                self.expect(lambda line: False, "its exit", timeout=15)
        except (DidNotHold, CouldNotRun):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the process if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ----------------------------------------------------------------------------------- the parts


@dataclass
class Checks:
    """The checks of the run, each printed with its outcome."""

    failed: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        """Record and print one check."""
        if not ok:
            self.failed.append(what)
        say("check", f"{what}  [{'ok' if ok else 'FAILED'}]")


def one(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
    """The one row `query` returns; `CouldNotRun` when it returns none."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise CouldNotRun(f"no row from {query!r} {params!r}")
    return tuple(row)


def show_epochs(found: dict[int, int]) -> str:
    """`id 1 epoch 1, id 2 epoch 2`."""
    return ", ".join(f"id {i} epoch {e}" for i, e in sorted(found.items()))


def wait_for_lapse(conn: psycopg.Connection[Any], epochs: dict[int, int]) -> datetime | None:
    """Wait, on the server's clock, until every lease of the tokens `epochs` (id -> epoch) has
    lapsed (or the item was claimed anew); the latest of them, as the server had it."""
    last = None
    while True:
        row = conn.execute(
            """
            SELECT max(i.lease_until), clock_timestamp()
              FROM workfence.items AS i
              JOIN unnest(%s::bigint[], %s::bigint[]) AS t(id, epoch)
                ON i.id = t.id AND i.epoch = t.epoch AND i.state = 'claimed'
            """,
            (list(epochs), list(epochs.values())),
        ).fetchone()
        assert row is not None
        until, now = row
        if until is None or until < now:
            return until or last
        last = until
        conn.execute("SELECT pg_sleep_until(%s)", (until,))


def part(
    queue_name: str,
    stall: str,
    cluster: Cluster,
    app: psycopg.Connection[Any],
    owner: str,
    checks: Checks,
) -> None:
    """One part: A claims three items and stops holding them, B takes them over after the
    lapse, A resumes and is refused; then the part's own checks."""
    keys = KEYS[queue_name]
    field_name = "invoice" if queue_name == "invoices" else "message"
    with app.transaction():
        ids: dict[str, int] = {
            key: one(
                app,
                "SELECT id FROM workfence.work_enqueue(%s, %s, key => %s)",
                (queue_name, Jsonb({field_name: key}), key),
            )[0]
            for key in keys
        }
    say(
        "enqueue",
        f"queue {queue_name}: "
        + ", ".join(f"{k} (id {i})" for k, i in ids.items())
        + ", in one transaction",
    )

    a = WorkerProc.start("A", queue_name, owner, cluster, stall)
    say("start", f"worker A: pid {a.proc.pid}, owner {owner!r}, lease 2 s, heartbeat every 0.7 s")
    b: WorkerProc | None = None
    try:
        [claimed] = a.expect_all("claims of all three items", (CLAIM, ids.values()))
        a_epochs = {i: int(m.group("epoch")) for i, m in claimed.items()}
        stall_line = a.expect(lambda line: line.startswith("job stall"), "its stall")
        stalled = re.search(r"id=(\d+)", stall_line)
        if stalled is None:
            raise CouldNotRun(f"A's stall line names no item: {stall_line!r}")
        stalled_id = int(stalled.group(1))
        a.stopped()
        say(
            "STOP",
            f"A (pid {a.proc.pid}) is stopped (SIGSTOP) holding {show_epochs(a_epochs)};"
            " nothing of it runs, its heartbeat neither",
        )

        b = WorkerProc.start("B", queue_name, owner, cluster, "")
        b_pid = b.proc.pid
        say("start", f"worker B: pid {b.proc.pid}, the SAME owner {owner!r}")
        until = wait_for_lapse(app, a_epochs)
        say(
            "LAPSE",
            (
                f"A's leases ran out at {until:%H:%M:%S.%f} by the server's clock"
                if until
                else "A's leases ran out by the server's clock"
            ),
        )

        [b_claims] = b.expect_all("claims of the three lapsed items", (CLAIM, ids.values()))
        b_epochs = {i: int(m.group("epoch")) for i, m in b_claims.items()}
        b.expect_all(
            "finishes of all three", (r"^finish id=(?P<id>\d+) epoch=\d+ ok", ids.values())
        )
        say(
            "took",
            f"B holds the items anew, newer epochs: {show_epochs(b_epochs)}, and did the jobs",
        )

        os.kill(a.proc.pid, signal.SIGCONT)
        say("RESUME", f"A (pid {a.proc.pid}) continues (SIGCONT), still holding its old tokens")
        wanted: list[tuple[str, Iterable[int]]] = [
            (r"^refused id=(?P<id>\d+) \(lease lost\)", ids.values())
        ]
        if queue_name == "messages":
            # The job A stopped in (the first it ran) sends once it is resumed.
            wanted.append((r"^job send id=(?P<id>\d+) .*REJECTED", [stalled_id]))
        found = a.expect_all("a refusal for every item it held", *wanted)
        if queue_name == "messages":
            say(
                "REFUSED",
                "A's late send was rejected by the provider (it holds a newer epoch),"
                f" and every one of A's {len(found[0])} tokens was refused by the queue",
            )
        else:
            say("REFUSED", f"every one of A's {len(found[0])} tokens was refused by the queue")
    finally:
        started = [worker for worker in (a, b) if worker is not None]
        try:
            for worker in started:
                worker.end()
        finally:
            # Ending one may raise (the demo's stdout closed, say): none is left running.
            for worker in started:
                worker.kill()

    # The part's checks, on the databases.
    final = {
        key: one(app, "SELECT state, epoch FROM workfence.items WHERE id = %s", (item_id,))
        for key, item_id in ids.items()
    }
    for key, item_id in ids.items():
        state, epoch = final[key]
        checks.check(
            state == "done" and epoch == b_epochs.get(item_id),
            f"item {key} done under B's epoch {b_epochs.get(item_id)}"
            f" (state {state}, epoch {epoch})",
        )
    if queue_name == "invoices":
        for key in keys:
            rows = app.execute(
                "SELECT epoch, worker_pid FROM demo.invoices_sent WHERE invoice = %s", (key,)
            ).fetchall()
            epoch = final[key][1]
            checks.check(
                len(rows) == 1 and rows[0][0] == epoch and rows[0][1] == b_pid,
                f"demo.invoices_sent has exactly one row for {key}, with the final epoch {epoch}"
                f" (rows: {[tuple(r) for r in rows]})",
            )
    else:
        with psycopg.connect(cluster.dsn(PROVIDER), autocommit=True) as provider:
            for key in keys:
                epoch = final[key][1]
                accepted = provider.execute(
                    "SELECT epoch FROM provider.attempts WHERE message = %s AND accepted"
                    " ORDER BY n",
                    (key,),
                ).fetchall()
                rejected = provider.execute(
                    "SELECT epoch FROM provider.attempts WHERE message = %s AND NOT accepted"
                    " ORDER BY n",
                    (key,),
                ).fetchall()
                checks.check(
                    [r[0] for r in accepted] == [epoch],
                    f"the provider delivered {key} exactly once, with the final epoch {epoch}"
                    f" (accepted: {[r[0] for r in accepted]},"
                    f" rejected: {[r[0] for r in rejected]})",
                )
        rows = app.execute(
            "SELECT message, epoch, outcome FROM demo.messages_sent ORDER BY message"
        ).fetchall()
        want = [(key, final[key][1], "accepted") for key in keys]
        checks.check(
            [tuple(r) for r in rows] == want,
            "demo.messages_sent: each message's accepted send, recorded under the final epoch;"
            f" nothing of A's committed ({[tuple(r) for r in rows]})",
        )
    counted = app.execute(
        "SELECT refused, lapsed FROM workfence.work_queue_stats WHERE queue = %s", (queue_name,)
    ).fetchone()
    checks.check(
        counted is not None and tuple(counted) == (3, 3),
        f"work_queue_stats of {queue_name}: refused={counted[0] if counted else None}"
        f" lapsed={counted[1] if counted else None} (A's three tokens refused, its three leases"
        " lapsed and claimed anew)",
    )


# ----------------------------------------------------------------------------------- main


def default_dir() -> Path:
    """`$WORKFENCE_DEMO_DIR`, else `<repo>/.demo/cluster`."""
    return Path(os.environ.get("WORKFENCE_DEMO_DIR") or REPO / ".demo" / "cluster")


def setup(cluster: Cluster) -> psycopg.Connection[Any]:
    """Start the cluster, create the two databases; the application's connection (autocommit)."""
    replaced = cluster.create()
    cluster.start()
    say(
        "cluster",
        f"PostgreSQL 15 on {HOST}:{cluster.port}, pg_workfence preloaded,"
        f" data dir {cluster.data_dir}"
        + (" (replaced the previous demo cluster)" if replaced else ""),
    )
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as admin:
        for database in (DATABASE, PROVIDER):
            admin.execute(f"CREATE DATABASE {database}")  # fixed names, no input
    with psycopg.connect(cluster.dsn(PROVIDER), autocommit=True) as provider:
        provider.execute(PROVIDER_SCHEMA)
    app = psycopg.connect(cluster.dsn(DATABASE), autocommit=True)
    app.execute(APP_SCHEMA)
    row = app.execute(
        "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_workfence'"
    ).fetchone()
    say(
        "database",
        f"{DATABASE}: CREATE EXTENSION pg_workfence (version {row[0] if row else '?'}),"
        " business tables demo.invoices_sent and demo.messages_sent",
    )
    say(
        "database",
        f"{PROVIDER}: the outside system, provider.deliver(message, epoch, body)"
        " keeps the highest epoch per message and rejects older ones",
    )
    say(
        "settings",
        "workfence.notify_lease_lost = off: a worker learns that its lease is lost"
        " from a refused call (counted in work_queue_stats.refused)",
    )
    return app


def verdict(cluster: Cluster, checks: Checks, completed: bool) -> bool:
    """Print the verdict and how to look around; true when the demo held."""
    held = completed and not checks.failed
    print()
    if held:
        print(
            "VERDICT: PASS - the stopped worker A was fenced off: every call under its old"
            " tokens was refused, each invoice was written once, each message delivered once,"
            " all by B."
        )
    else:
        print(
            "VERDICT: FAIL - the scenario does not hold: "
            + ("; ".join(checks.failed) if checks.failed else "it could not be completed")
        )
    print()
    print("The cluster keeps running. Look around with:")
    print(f"  psql -h {HOST} -p {cluster.port} -U {SUPERUSER} -d {DATABASE}")
    print("  e.g. SELECT * FROM demo.invoices_sent ORDER BY invoice;")
    print("       SELECT queue, done, refused, lapsed FROM workfence.work_queue_stats;")
    print(f"  and -d {PROVIDER}: SELECT * FROM provider.attempts ORDER BY n;")
    print("Stop it with:")
    print("  scripts/demo.sh stop")
    print(f"  (or: {cluster.stop_command()})")
    return held


def main(argv: list[str]) -> int:
    """Run the demo; the exit status (0 held, 1 did not hold, 2 could not run)."""
    parser = argparse.ArgumentParser(
        prog="demo/demo.py",
        usage="demo/demo.py [--dir DIR]",
        description="pg_workfence's demo: two worker processes with one owner name, one stopped"
        " past its lease (scripts/demo.sh runs it).",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the demo cluster lives (default: $WORKFENCE_DEMO_DIR, else"
        " <repo>/.demo/cluster); a previous demo cluster there is stopped and replaced",
    )
    args = parser.parse_args(argv)
    data_dir = (args.dir or default_dir()).resolve()
    try:
        bin_dir = Path(run([PG_CONFIG, "--bindir"], "pg_config").strip())
    except CouldNotRun as error:
        print(f"demo/demo.py needs PostgreSQL 15 ({PG_CONFIG}): {error}", file=sys.stderr)
        return 2
    cluster = Cluster(data_dir, bin_dir)
    owner = f"worker@{socket.gethostname()}"
    checks = Checks()
    print("pg_workfence demo: two worker processes with ONE owner name; one stops past its lease")
    print()
    completed = False
    try:
        app = setup(cluster)
        with app:
            print()
            print(
                "Part 1: a business table, written in the job's fenced transaction"
                " (work_assert ... work_finish, one commit)"
            )
            part("invoices", "before-write", cluster, app, owner, checks)
            print()
            print(
                "Part 2: a message to an outside system: the job checks its lease, then sends"
                " with its epoch; the provider rejects older epochs"
            )
            part("messages", "after-guard", cluster, app, owner, checks)
        completed = True
    except DidNotHold as error:
        checks.failed.append(str(error))
        say("FAILED", str(error))
    except (CouldNotRun, psycopg.Error, OSError) as error:
        print(f"\ndemo/demo.py could not run the demo: {error}", file=sys.stderr)
        if cluster.port:
            print("Its cluster may still be running: scripts/demo.sh stop", file=sys.stderr)
        return 2
    return 0 if verdict(cluster, checks, completed) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
