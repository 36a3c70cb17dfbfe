"""Shared fixtures: the test database's DSN (WORKFENCE_TEST_DSN, required: the integration
tests fail without it), a fresh queue name per test, and helpers to run a worker and to wait on
a condition with a deadline (no sleeps as synchronisation)."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

import workfence


@pytest.fixture
def dsn() -> str:
    """The DSN of a database with the extension, from WORKFENCE_TEST_DSN; fails when unset."""
    value = os.environ.get("WORKFENCE_TEST_DSN")
    if not value:
        pytest.fail(
            "WORKFENCE_TEST_DSN is not set: run the suite with "
            "`bash scripts/client-tests.sh python`, or set it to a libpq connection string "
            "of a database with CREATE EXTENSION pg_workfence"
        )
    return value


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses."""
    return f"pytest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def db(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit connection of the test's own, for setup and checks."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def table(db: psycopg.AsyncConnection[Any]) -> AsyncIterator[str]:
    """A business table of the test's own: (item_id bigint, epoch bigint, output bigint)."""
    name = f"public.results_{uuid.uuid4().hex[:12]}"
    await db.execute(f"CREATE TABLE {name} (item_id bigint, epoch bigint, output bigint)")
    try:
        yield name
    finally:
        await db.execute(f"DROP TABLE {name}")


async def eventually(
    condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0
) -> None:
    """Wait until `condition()` is true, checking every 20 ms; fail with `what` after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        if loop.time() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


async def wait_event(event: asyncio.Event, what: str, timeout: float = 15.0) -> None:
    """Wait for `event`; fail with `what` after `timeout` seconds."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pytest.fail(f"not within {timeout} s: {what}")


@asynccontextmanager
async def running(
    worker: workfence.Worker, timeout: float = 30.0
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `worker` in a task for the block; then stop it and wait for `run()` to return."""
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        worker.stop()
        await asyncio.wait_for(task, timeout)


async def state(db: psycopg.AsyncConnection[Any], item_id: int) -> tuple[Any, ...]:
    """(state, owner, epoch, attempts, result, lease lapsed) of one item, as the server has it."""
    cur = await db.execute(
        "SELECT state::text, owner, epoch, attempts, result, lease_until < clock_timestamp()"
        "  FROM workfence.items WHERE id = %s",
        (item_id,),
    )
    row = await cur.fetchone()
    assert row is not None, f"no item {item_id}"
    return row


class Lines(logging.Handler):
    """Collects the `workfence` logger's messages."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Any:
    """The `workfence` log messages of the test, at DEBUG and above."""
    handler = Lines()
    logger = logging.getLogger("workfence")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
