-- The baseline's claim (bench/src/contender.rs, BASELINE; scripts/profile_sql.py):
-- $1 queue, $2 owner, $3 lease (interval text), $4 max_items -> (id, epoch).
WITH due AS (
SELECT i.id, i.priority, i.run_at FROM baseline.items AS i
WHERE i.queue = $1 AND i.state = 'pending'
AND i.run_at <= (SELECT pg_catalog.clock_timestamp())
ORDER BY i.priority, i.run_at, i.id LIMIT $4::int
FOR UPDATE SKIP LOCKED
), lapsed AS (
SELECT i.id, i.priority, i.run_at FROM baseline.items AS i
WHERE i.queue = $1 AND i.state = 'claimed'
AND i.lease_until <= (SELECT pg_catalog.clock_timestamp())
AND i.attempts < i.max_attempts
ORDER BY i.priority, i.run_at, i.id LIMIT $4::int
FOR UPDATE SKIP LOCKED
), picked AS (
SELECT c.id FROM (SELECT * FROM due UNION ALL SELECT * FROM lapsed) AS c
ORDER BY c.priority, c.run_at, c.id LIMIT $4::int
)
UPDATE baseline.items AS i SET state = 'claimed',
epoch = pg_catalog.nextval('baseline.epoch_seq'), owner = $2,
lease_until = pg_catalog.clock_timestamp() + ($3::text)::interval,
attempts = i.attempts + 1
FROM picked WHERE i.id = picked.id
RETURNING i.id, i.epoch
