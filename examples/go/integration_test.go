package main

// Integration tests: the worker against a real cluster, whose DSN comes from
// WORKFENCE_TEST_DSN (scripts/client-tests.sh starts one and sets it). Each
// test makes a database of its own (the worker writes to the fixed table
// examples.results, so each test gets its own copy of it) and a fresh queue
// name, and drops the database at the end. The worker runs in-process (run
// with a context standing in for SIGTERM), or, for the two-copies test, as
// real processes: this test binary re-executed as the worker, stopped with a
// real SIGTERM.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// asWorkerEnv, set to 1, makes this test binary run the worker's main instead
// of the tests (the two-copies test starts it so).
const asWorkerEnv = "WORKFENCE_GO_TEST_AS_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(asWorkerEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// deadline is the longest any awaited condition may take.
const deadline = 60 * time.Second

// testDSN is WORKFENCE_TEST_DSN; the test fails (not skips) without it.
func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("WORKFENCE_TEST_DSN")
	if dsn == "" {
		t.Fatal("WORKFENCE_TEST_DSN is not set: the integration tests need a PostgreSQL database " +
			"with pg_workfence installable (scripts/client-tests.sh go starts one and sets it)")
	}
	return dsn
}

// randomSuffix is 8 random hex digits.
func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// withDatabase returns dsn naming database db instead of its own: in a URL
// the path is replaced; in a keyword=value string a dbname is appended (the
// last of a repeated keyword wins).
func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(db)
	return dsn + " dbname='" + quoted + "'", nil
}

// fixture is one test's database: its DSN and a connection for the test's
// own statements.
type fixture struct {
	db    string // the database's name
	dsn   string
	conn  *pgx.Conn
	queue string
}

// newFixture creates a database of the test's own with the extension, the
// schema examples and the table examples.results (as harness/tests/client/examples.rs
// does), dropped when the test ends.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	base := testDSN(t)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to WORKFENCE_TEST_DSN: %v", err)
	}
	defer admin.Close(ctx)
	suffix := randomSuffix(t)
	db := "workfence_go_" + suffix
	// A database name cannot be a parameter: quoted as an identifier.
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		t.Fatalf("CREATE DATABASE %s: %v", db, err)
	}
	t.Cleanup(func() {
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connecting to drop %s: %v", db, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("DROP DATABASE %s: %v", db, err)
		}
	})
	dsn, err := withDatabase(base, db)
	if err != nil {
		t.Fatalf("DSN for %s: %v", db, err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", db, err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	var current string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil || current != db {
		t.Fatalf("connected to %q (%v), want %q", current, err, db)
	}
	if _, err := conn.Exec(ctx, `
		CREATE EXTENSION pg_workfence;
		CREATE SCHEMA examples;
		CREATE TABLE examples.results (item_id bigint, epoch bigint, worker_pid int, output bigint,
		                               at timestamptz DEFAULT clock_timestamp());`); err != nil {
		t.Fatalf("extension, schema and table: %v", err)
	}
	return &fixture{db: db, dsn: dsn, conn: conn, queue: "go-test-" + suffix}
}

// config is the worker's settings for this fixture: its DSN and queue, a
// shared owner name, batch 3, the given lease, long polls of half a second.
func (f *fixture) config(lease time.Duration) Config {
	return Config{
		DSN:   f.dsn,
		Queue: f.queue,
		Owner: "go-tests/shared-host",
		Batch: 3,
		Lease: lease,
		Wait:  500 * time.Millisecond,
	}
}

// enqueue adds an item with payload and key to the fixture's queue and
// returns its id.
func (f *fixture) enqueue(t *testing.T, key, payload string, maxAttempts int) int64 {
	t.Helper()
	var id int64
	err := f.conn.QueryRow(context.Background(),
		`SELECT id FROM workfence.work_enqueue($1, $2::jsonb, $3, max_attempts => $4)`,
		f.queue, payload, key, maxAttempts).Scan(&id)
	if err != nil {
		t.Fatalf("enqueue %s: %v", key, err)
	}
	return id
}

// count is the bigint the query returns.
func (f *fixture) count(t *testing.T, query string, args ...interface{}) int64 {
	t.Helper()
	var n int64
	if err := f.conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// state is the item's state, owner (or "") and epoch (or 0), and its number
// of business rows.
func (f *fixture) state(t *testing.T, id int64) (state, owner string, epoch, rows int64) {
	t.Helper()
	err := f.conn.QueryRow(context.Background(), `
		SELECT i.state::text, coalesce(i.owner, ''), coalesce(i.epoch, 0),
		       (SELECT count(*) FROM examples.results AS r WHERE r.item_id = i.id)
		  FROM workfence.items AS i WHERE i.id = $1`, id).Scan(&state, &owner, &epoch, &rows)
	if err != nil {
		t.Fatalf("item %d: %v", id, err)
	}
	return state, owner, epoch, rows
}

// waitFor polls cond every 20 ms until it holds; fails with what and the
// worker's last lines after limit.
func waitFor(t *testing.T, limit time.Duration, what string, logs func() []string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not reached within %v; the worker's last lines:\n%s", what, limit, tail(logs()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail is the last 20 lines, one per line.
func tail(lines []string) string {
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// running is a worker running in-process.
type running struct {
	log  *lines
	stop context.CancelFunc // stands in for SIGTERM
	done chan error         // run's result
}

// startWorker runs the worker with cfg in a goroutine.
func startWorker(t *testing.T, cfg Config) *running {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	r := &running{log: &lines{}, stop: stop, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, cfg, log.New(r.log, "", 0)) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-r.done:
		case <-time.After(deadline):
			t.Errorf("the worker did not return within %v of its stop", deadline)
		}
	})
	return r
}

// shutdown stands in for SIGTERM and waits for run to return; it must
// return nil within limit, with "exit" as its last line.
func (r *running) shutdown(t *testing.T, limit time.Duration) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("run returned %v; the worker's last lines:\n%s", err, tail(r.log.all()))
		}
		r.done <- nil // for the cleanup
	case <-time.After(limit):
		t.Fatalf("the worker did not return within %v of its stop; its last lines:\n%s", limit, tail(r.log.all()))
	}
	all := r.log.all()
	if len(all) == 0 || all[len(all)-1] != "exit" {
		t.Fatalf("the last line is not \"exit\":\n%s", tail(all))
	}
}

// has reports whether the worker logged line exactly.
func (r *running) has(line string) bool {
	for _, l := range r.log.all() {
		if l == line {
			return true
		}
	}
	return false
}

// claimedEpoch waits for the worker's claim line of item id and returns its epoch.
func (r *running) claimedEpoch(t *testing.T, id int64) int64 {
	t.Helper()
	prefix := fmt.Sprintf("claim id=%d epoch=", id)
	var epoch int64
	waitFor(t, deadline, fmt.Sprintf("the claim of item %d", id), r.log.all, func() bool {
		for _, l := range r.log.all() {
			if strings.HasPrefix(l, prefix) {
				fields := strings.Fields(strings.TrimPrefix(l, prefix))
				epoch, _ = strconv.ParseInt(fields[0], 10, 64)
				return true
			}
		}
		return false
	})
	return epoch
}

func TestWorkerFinishesEveryItemAndFailsTheRaisingOne(t *testing.T) {
	f := newFixture(t)
	ids := map[int64]int64{} // id -> n
	for n := int64(1); n <= 8; n++ {
		payload := fmt.Sprintf(`{"n": %d, "sleep_ms": 10, "fail": %v}`, n, n == 4)
		ids[f.enqueue(t, fmt.Sprintf("item-%d", n), payload, 2)] = n
	}
	w := startWorker(t, f.config(3*time.Second))
	waitFor(t, deadline, "every item done or failed", w.log.all, func() bool {
		return f.count(t, `SELECT count(*) FROM workfence.items WHERE queue = $1 AND state IN ('done', 'failed')`,
			f.queue) == 8
	})
	w.shutdown(t, 10*time.Second)

	for id, n := range ids {
		state, _, epoch, rows := f.state(t, id)
		if n == 4 {
			attempts := f.count(t, `SELECT attempts::bigint FROM workfence.items WHERE id = $1`, id)
			if state != "failed" || rows != 0 || attempts != 2 {
				t.Errorf("the raising item: state %s, %d business rows, %d attempts; want failed, 0, 2",
					state, rows, attempts)
			}
			failLine := fmt.Sprintf("fail id=%d epoch=%d error=job 4 failed on purpose", id, epoch)
			if !w.has(failLine) {
				t.Errorf("no line %q", failLine)
			}
			continue
		}
		var output int64
		var pid int32
		err := f.conn.QueryRow(context.Background(),
			`SELECT r.output, r.worker_pid FROM examples.results AS r WHERE r.item_id = $1 AND r.epoch = $2`,
			id, epoch).Scan(&output, &pid)
		if state != "done" || rows != 1 || err != nil || output != n*n || pid != int32(os.Getpid()) {
			t.Errorf("item n=%d: state %s, %d rows, row (%d, pid %d, %v); want done, one row (%d, pid %d) at its epoch",
				n, state, rows, output, pid, err, n*n, os.Getpid())
		}
		var result string
		if err := f.conn.QueryRow(context.Background(), `SELECT result::text FROM workfence.items WHERE id = $1`,
			id).Scan(&result); err != nil || result != fmt.Sprintf(`{"output": %d}`, n*n) {
			t.Errorf("item n=%d: result %s (%v)", n, result, err)
		}
		if line := fmt.Sprintf("finish id=%d epoch=%d ok", id, epoch); !w.has(line) {
			t.Errorf("no line %q", line)
		}
	}
}

func TestShutdownReleasesEveryHeldItem(t *testing.T) {
	f := newFixture(t)
	var ids []int64
	for n := 1; n <= 3; n++ {
		ids = append(ids, f.enqueue(t, fmt.Sprintf("long-%d", n), fmt.Sprintf(`{"n": %d, "sleep_ms": 60000}`, n), 3))
	}
	w := startWorker(t, f.config(3*time.Second))
	epochs := map[int64]int64{}
	for _, id := range ids {
		epochs[id] = w.claimedEpoch(t, id)
	}
	// One job runs, two wait in the batch: all three are released at once.
	w.shutdown(t, 10*time.Second)
	for _, id := range ids {
		state, _, _, rows := f.state(t, id)
		attempts := f.count(t, `SELECT attempts::bigint FROM workfence.items WHERE id = $1`, id)
		if state != "pending" || rows != 0 || attempts != 0 {
			t.Errorf("item %d after the shutdown: %s, %d rows, %d attempts; want pending, 0, 0 (attempt given back)",
				id, state, rows, attempts)
		}
		if line := fmt.Sprintf("release id=%d epoch=%d", id, epochs[id]); !w.has(line) {
			t.Errorf("no line %q:\n%s", line, tail(w.log.all()))
		}
	}
}

func TestShutdownCancelsTheLongPoll(t *testing.T) {
	f := newFixture(t)
	// The server caps one long poll at workfence.long_poll_max (3 s by
	// default): raised here, so that only the cancel can end the poll soon.
	if _, err := f.conn.Exec(context.Background(),
		"ALTER DATABASE "+pgx.Identifier{f.db}.Sanitize()+" SET workfence.long_poll_max = 600"); err != nil {
		t.Fatalf("raising workfence.long_poll_max: %v", err)
	}
	cfg := f.config(3 * time.Second)
	cfg.Wait = 10 * time.Minute
	w := startWorker(t, cfg)
	waitFor(t, deadline, "the worker's long poll waiting in the server", w.log.all, func() bool {
		return f.count(t, `SELECT count(*) FROM pg_catalog.pg_stat_activity
		                    WHERE datname = current_database() AND state = 'active'
		                      AND application_name = 'workfence-example-go main'
		                      AND query LIKE '%work_claim%'`) == 1
	})
	started := time.Now()
	w.shutdown(t, 10*time.Second)
	if took := time.Since(started); took > 2*time.Second {
		t.Errorf("the shutdown took %v: the long poll was not cancelled", took)
	}
	if got := w.log.all(); len(got) != 1 {
		t.Errorf("an idle worker logged %q, want only exit", got)
	}
	// The cancelled poll claimed nothing: an item enqueued now stays pending.
	id := f.enqueue(t, "after", `{"n": 1}`, 3)
	if state, _, _, _ := f.state(t, id); state != "pending" {
		t.Errorf("an item enqueued after the shutdown is %s", state)
	}
}

func TestLeaseLostNotificationStopsTheJob(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(time.Second)
	w := startWorker(t, cfg)
	stalled := f.enqueue(t, "stalled", `{"n": 7, "sleep_ms": 60000, "fail": false, "heartbeat": false}`, 3)
	oldEpoch := w.claimedEpoch(t, stalled)

	// Its lease lapses on the server's clock; the test claims the item under
	// the SAME owner name, in autocommit, so the notification goes out now.
	waitFor(t, deadline, "the stalled item's lease lapsed", w.log.all, func() bool {
		return f.count(t, `SELECT count(*) FROM workfence.items WHERE id = $1 AND lease_until < clock_timestamp()`,
			stalled) == 1
	})
	var id, epoch int64
	if err := f.conn.QueryRow(context.Background(),
		`SELECT id, epoch FROM workfence.work_claim($1, $2, interval '1 minute')`, f.queue, cfg.Owner,
	).Scan(&id, &epoch); err != nil || id != stalled || epoch <= oldEpoch {
		t.Fatalf("the test's claim: (%d, %d), %v; want the stalled item with an epoch above %d", id, epoch, err, oldEpoch)
	}
	reclaimed := time.Now()
	notified := fmt.Sprintf("lease lost (notified) id=%d epoch=%d", stalled, oldEpoch)
	waitFor(t, 5*time.Second, "the lease lost (notified) line", w.log.all, func() bool { return w.has(notified) })
	waitFor(t, 5*time.Second, "the refused line", w.log.all, func() bool {
		return w.has(fmt.Sprintf("refused id=%d (lease lost)", stalled))
	})
	t.Logf("the job stopped %v after the re-claim", time.Since(reclaimed))

	// The worker goes on serving.
	next := f.enqueue(t, "next", `{"n": 9, "sleep_ms": 20}`, 3)
	waitFor(t, deadline, "the next item finished", w.log.all, func() bool {
		state, _, _, _ := f.state(t, next)
		return state == "done"
	})
	w.shutdown(t, 10*time.Second)

	state, owner, nowEpoch, rows := f.state(t, stalled)
	if state != "claimed" || owner != cfg.Owner || nowEpoch != epoch || rows != 0 {
		t.Errorf("the stalled item: %s by %q at %d with %d rows; want claimed at the test's epoch %d, no row",
			state, owner, nowEpoch, rows, epoch)
	}
	for _, l := range w.log.all() {
		for _, event := range []string{"finish", "fail", "release"} {
			if strings.HasPrefix(l, fmt.Sprintf("%s id=%d ", event, stalled)) {
				t.Errorf("the worker settled the item whose lease it lost: %q", l)
			}
		}
		if strings.HasPrefix(l, "lease lost (notified) ") && l != notified {
			t.Errorf("a notification for another token was taken as ours: %q", l)
		}
	}
}

func TestRefusedRenewStopsTheJob(t *testing.T) {
	f := newFixture(t)
	w := startWorker(t, f.config(1500*time.Millisecond))
	id := f.enqueue(t, "cancelled", `{"n": 5, "sleep_ms": 60000}`, 3)
	w.claimedEpoch(t, id)
	waitFor(t, deadline, "a renew of the item", w.log.all, func() bool {
		return w.has(fmt.Sprintf("renew id=%d ok", id))
	})
	var cancelled bool
	if err := f.conn.QueryRow(context.Background(), `SELECT workfence.work_cancel($1, $2)`, f.queue, "cancelled").Scan(&cancelled); err != nil || !cancelled {
		t.Fatalf("work_cancel: %v, %v", cancelled, err)
	}
	waitFor(t, 10*time.Second, "the refused renew and the abandoned job", w.log.all, func() bool {
		return w.has(fmt.Sprintf("renew id=%d refused", id)) && w.has(fmt.Sprintf("refused id=%d (lease lost)", id))
	})
	w.shutdown(t, 10*time.Second)
	if state, _, _, rows := f.state(t, id); state != "cancelled" || rows != 0 {
		t.Errorf("the item: %s with %d rows; want cancelled with none", state, rows)
	}
}

func TestAssertRefusedRollsBackTheEffect(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cfg := f.config(time.Second)
	w := startWorker(t, cfg)
	// Unrenewed, the lease lapses while the job still sleeps.
	id := f.enqueue(t, "late", `{"n": 6, "sleep_ms": 2500, "heartbeat": false}`, 3)
	oldEpoch := w.claimedEpoch(t, id)
	waitFor(t, deadline, "the lease lapsed", w.log.all, func() bool {
		return f.count(t, `SELECT count(*) FROM workfence.items WHERE id = $1 AND lease_until < clock_timestamp()`,
			id) == 1
	})
	// The test re-claims it in a transaction it keeps open: the item's row
	// stays locked, and the notification waits for the COMMIT. The worker's
	// job ends meanwhile and its work_assert waits on the row lock.
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		t.Fatalf("BEGIN: %v", err)
	}
	defer tx.Rollback(ctx)
	var epoch int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM workfence.work_claim($1, $2, interval '1 minute')`,
		f.queue, cfg.Owner).Scan(&epoch); err != nil || epoch <= oldEpoch {
		t.Fatalf("the test's claim: %d, %v", epoch, err)
	}
	observer, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer observer.Close(ctx)
	waitFor(t, deadline, "the worker's work_assert waiting on the row lock", w.log.all, func() bool {
		var waiting int64
		err := observer.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
		                                WHERE datname = current_database() AND wait_event_type = 'Lock'
		                                  AND application_name = 'workfence-example-go main'
		                                  AND query LIKE '%work_assert%'`).Scan(&waiting)
		return err == nil && waiting == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	waitFor(t, 10*time.Second, "the refused line", w.log.all, func() bool {
		return w.has(fmt.Sprintf("refused id=%d (lease lost)", id))
	})
	w.shutdown(t, 10*time.Second)
	state, _, nowEpoch, rows := f.state(t, id)
	if state != "claimed" || nowEpoch != epoch || rows != 0 {
		t.Errorf("the item: %s at %d with %d rows; want claimed at the test's epoch %d with no row",
			state, nowEpoch, rows, epoch)
	}
	if w.has(fmt.Sprintf("finish id=%d epoch=%d ok", id, oldEpoch)) {
		t.Error("the worker logged a finish of the item whose lease it lost")
	}
}

// process is a copy of the worker running as a real process.
type process struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	read  chan struct{} // closed when its stdout is at EOF
}

// startProcess runs this test binary as the worker with cfg's settings.
func startProcess(t *testing.T, cfg Config) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		asWorkerEnv+"=1",
		"WORKFENCE_DSN="+cfg.DSN,
		"WORKFENCE_QUEUE="+cfg.Queue,
		"WORKFENCE_OWNER="+cfg.Owner,
		fmt.Sprintf("WORKFENCE_BATCH=%d", cfg.Batch),
		fmt.Sprintf("WORKFENCE_LEASE_SECONDS=%g", cfg.Lease.Seconds()),
		fmt.Sprintf("WORKFENCE_WAIT_SECONDS=%g", cfg.Wait.Seconds()),
	)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the worker process: %v", err)
	}
	p := &process{cmd: cmd, read: make(chan struct{})}
	go func() {
		defer close(p.read)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, scanner.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// all returns the lines the process printed so far, without their prefix.
func (p *process) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	prefix := fmt.Sprintf("[go pid=%d] ", p.cmd.Process.Pid)
	out := make([]string, len(p.lines))
	for i, l := range p.lines {
		out[i] = strings.TrimPrefix(l, prefix)
	}
	return out
}

// holding is the ids it logged as claimed and not yet settled.
func (p *process) holding() map[int64]bool {
	held := map[int64]bool{}
	for _, l := range p.all() {
		fields := strings.Fields(l)
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "id=") {
			continue
		}
		id, _ := strconv.ParseInt(strings.TrimPrefix(fields[1], "id="), 10, 64)
		switch fields[0] {
		case "claim":
			held[id] = true
		case "finish", "fail", "release", "refused":
			delete(held, id)
		}
	}
	return held
}

// terminate sends SIGTERM and waits for the exit, which must be 0 after an
// "exit" line.
func (p *process) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	exited := make(chan error, 1)
	go func() {
		<-p.read
		exited <- p.cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the worker process exited with %v after SIGTERM:\n%s", err, tail(p.all()))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker process did not exit within 30 s of SIGTERM:\n%s", tail(p.all()))
	}
	if all := p.all(); len(all) == 0 || all[len(all)-1] != "exit" {
		t.Fatalf("the worker process's last line is not exit:\n%s", tail(all))
	}
}

func TestTwoProcessesSharingTheOwnerFinishEveryItemOnce(t *testing.T) {
	f := newFixture(t)
	const items = 60
	for n := 1; n <= items; n++ {
		f.enqueue(t, fmt.Sprintf("item-%d", n), fmt.Sprintf(`{"n": %d, "sleep_ms": %d, "fail": false}`, n, 20+n%5*10), 3)
	}
	cfg := f.config(3 * time.Second)
	cfg.Batch = 5
	a, b := startProcess(t, cfg), startProcess(t, cfg)
	finished := func() int64 {
		return f.count(t, `SELECT count(*) FROM workfence.items WHERE queue = $1 AND state = 'done'`, f.queue)
	}
	// SIGTERM A once it has finished a few items and holds some.
	waitFor(t, deadline, "copy A holding items after a few finishes", a.all, func() bool {
		return finished() >= 10 && len(a.holding()) > 0
	})
	a.terminate(t)
	if held := a.holding(); len(held) != 0 {
		t.Fatalf("copy A exited still holding %v:\n%s", held, tail(a.all()))
	}
	waitFor(t, deadline, "every item done", b.all, func() bool { return finished() == items })
	b.terminate(t)

	bad := f.count(t, `
		SELECT count(*) FROM (
		  SELECT i.id FROM workfence.items AS i LEFT JOIN examples.results AS r
		    ON r.item_id = i.id AND r.epoch = i.epoch AND r.output = (i.payload->>'n')::bigint * (i.payload->>'n')::bigint
		   WHERE i.queue = $1
		   GROUP BY i.id HAVING count(r.item_id) <> 1
		  UNION ALL
		  SELECT r.item_id FROM examples.results AS r JOIN workfence.items AS i ON i.id = r.item_id
		   WHERE r.epoch <> i.epoch) AS wrong`, f.queue)
	if bad != 0 {
		t.Fatalf("%d items without exactly one business row at their final epoch", bad)
	}
	// What A released, B finished later (a newer epoch, B's pid).
	released := 0
	for _, l := range a.all() {
		var id, epoch int64
		if _, err := fmt.Sscanf(l, "release id=%d epoch=%d", &id, &epoch); err != nil {
			continue
		}
		released++
		state, _, finalEpoch, _ := f.state(t, id)
		pid := f.count(t, `SELECT worker_pid::bigint FROM examples.results WHERE item_id = $1`, id)
		if state != "done" || finalEpoch <= epoch || pid != int64(b.cmd.Process.Pid) {
			t.Errorf("item %d released by A at epoch %d: %s at epoch %d by pid %d; want done by B (pid %d) later",
				id, epoch, state, finalEpoch, pid, b.cmd.Process.Pid)
		}
	}
	t.Logf("copy A released %d items on SIGTERM; copy B finished them", released)
}
