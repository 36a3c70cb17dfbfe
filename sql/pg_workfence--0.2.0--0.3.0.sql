-- pg_workfence 0.2.0 -> 0.3.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.3.0 is released: never edit it, write the next step as
-- pg_workfence--0.3.0--<next>.sql. tests/upgrade.rs installs 0.1.0 and 0.2.0
-- (the frozen sql/pg_workfence--<version>.sql), updates them, and checks that
-- the result is object for object a fresh 0.3.0 install and that every token
-- is judged as before.
--
-- What 0.3.0 changes:
-- - workfence.items loses its two CHECK constraints. The functions, the only
--   writers, keep both invariants (attempts >= 0 and max_attempts >= 1; a
--   claimed item has owner, epoch and lease_until); PostgreSQL 15 re-prepares
--   CHECK expressions on every UPDATE statement, up to 10% of claim and finish
--   throughput at 16 connections (docs/benchmarks.md).
-- - The functions' SQL is unchanged. The library now runs its statements as
--   generic plans and, under synchronous_commit = off, flushes WAL only up to
--   the epoch sequence's latest record; neither shows in the catalog.
ALTER TABLE workfence.items
    DROP CONSTRAINT items_attempts_range,
    DROP CONSTRAINT items_claimed_has_lease;
