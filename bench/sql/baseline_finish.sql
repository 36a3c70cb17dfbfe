-- The baseline's fenced finish (bench/src/contender.rs, BASELINE; scripts/profile_sql.py):
-- $1 id, $2 owner, $3 epoch -> one row updated when the token was current.
UPDATE baseline.items SET state = 'done', result = NULL, lease_until = NULL,
finished_at = pg_catalog.clock_timestamp()
WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
