-- The hand-written baseline of scripts/bench.sh: pg_workfence's semantics as
-- plain SQL a client sends itself (see bench/src/contender.rs for the
-- statements). Same columns, same indexes and the same claim order as
-- workfence.items, so the difference measured is the extension's own overhead:
-- function calls, argument checks, the dead-letter path, SECURITY DEFINER.
CREATE SCHEMA baseline;
CREATE SEQUENCE baseline.epoch_seq AS bigint;
CREATE TYPE baseline.item_state AS ENUM ('pending', 'claimed', 'done', 'failed', 'cancelled');
CREATE TABLE baseline.items (
    id            bigserial PRIMARY KEY,
    queue         text NOT NULL,
    key           text NOT NULL,
    payload       jsonb NOT NULL,
    priority      integer NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    state         baseline.item_state NOT NULL DEFAULT 'pending',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 25,
    owner         text,
    epoch         bigint,
    lease_until   timestamptz,
    last_error    text,
    result        jsonb,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    finished_at   timestamptz,
    UNIQUE (queue, key)
);
CREATE INDEX items_due_idx ON baseline.items (queue, priority, run_at, id) WHERE state = 'pending';
CREATE INDEX items_lease_idx ON baseline.items (queue, lease_until) WHERE state = 'claimed';
