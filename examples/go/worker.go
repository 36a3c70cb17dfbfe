// Command workfence-go-worker is the pg_workfence example worker in Go, with
// pgx v4: the same program as every language's example (examples/README.md).
//
// It long-polls workfence.work_claim for a batch, runs each item's job while a
// heartbeat goroutine (on its own connection) renews every item the worker
// holds every lease/3 and LISTENs on work_lease_lost in between, and commits
// the job's effect only under its lease: work_assert, the INSERT into
// examples.results and work_finish in one transaction. A job that errors is
// recorded with work_fail (retried in 0.2 s); a refused renew, or a
// notification naming one of its tokens (id and epoch), cancels the job's
// context, and the item is abandoned. SIGTERM or SIGINT stops it taking work,
// cancels a long poll in flight, cancels the job in progress, hands every item
// it holds back with work_release, logs "exit" and exits 0.
//
// Settings come from the environment (see configFromEnv and -h); every event is
// one line on stdout, prefixed "[go pid=<pid>] ". See examples/go/README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4"
)

// The statements of the worker loop; every value is a parameter.
const (
	// claimSQL is the long poll: up to $4 items under a lease of $3 seconds,
	// waiting up to $5 seconds in the server for work.
	claimSQL = `SELECT id, key, payload, epoch, attempt
	  FROM workfence.work_claim($1, $2, make_interval(secs => $3), $4, make_interval(secs => $5))`
	// assertSQL raises 55000 unless the token is current, and holds the
	// item's row lock to the end of the transaction.
	assertSQL = `SELECT workfence.work_assert($1, $2, $3)`
	// insertSQL is the job's own effect, written only under work_assert.
	insertSQL = `INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES ($1, $2, $3, $4)`
	// finishSQL marks the item done, in the same transaction as its effect.
	finishSQL = `SELECT workfence.work_finish($1, $2, $3, $4)`
	// failSQL records a job's error; the item is pending again after $5 seconds,
	// or failed on its last attempt.
	failSQL = `SELECT workfence.work_fail($1, $2, $3, $4, retry_in => make_interval(secs => $5))`
	// releaseSQL hands an item back unfinished (shutdown).
	releaseSQL = `SELECT workfence.work_release($1, $2, $3)`
)

// retryIn is the delay before a failed item's next attempt: short, so that
// the examples' tests run fast (a real worker would leave it to the server's
// exponential backoff by passing NULL).
const retryIn = 200 * time.Millisecond

// cancelRepeat is how often the cancel of a long poll is sent again while the
// poll has not ended: a cancel that reaches the server before the claim does
// finds the connection idle and is dropped.
const cancelRepeat = 250 * time.Millisecond

// usage is what -h prints: the settings configFromEnv reads.
const usage = `usage: workfence-go-worker   (settings from the environment)
  WORKFENCE_DSN            connection string (required), e.g. host=127.0.0.1 port=5432 dbname=app
  WORKFENCE_QUEUE          queue to work (default: examples)
  WORKFENCE_OWNER          owner name (default: the hostname; fencing does not rely on it)
  WORKFENCE_BATCH          max_items per claim (default 5)
  WORKFENCE_LEASE_SECONDS  lease length; the heartbeat renews every third of it (default 6)
  WORKFENCE_WAIT_SECONDS   how long one claim waits in the server (default 5)
Runs until SIGTERM or SIGINT, then releases what it holds and exits 0.`

// newLogger returns the worker's event log: one line per event on stdout,
// prefixed "[go pid=<pid>] ". A log.Logger writes each line with one
// unbuffered write, so a reader of a pipe sees it at once.
func newLogger() *log.Logger {
	return log.New(os.Stdout, fmt.Sprintf("[go pid=%d] ", os.Getpid()), 0)
}

// main reads the settings, runs the worker until SIGTERM or SIGINT and exits
// 0; on an error (a bad setting, a lost connection) it logs "error=..." and
// "exit status=1" and exits 1 (items it held come back when their leases lapse).
func main() {
	for _, arg := range os.Args[1:] {
		if arg == "-h" || arg == "--help" || arg == "-help" {
			fmt.Println(usage)
			return
		}
	}
	logger := newLogger()
	stopping, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := configFromProcess()
	if err == nil {
		err = run(stopping, cfg, logger)
	}
	if err != nil {
		logger.Printf("error=%v", err)
		logger.Print("exit status=1")
		stop()
		os.Exit(1)
	}
}

// connect opens a connection to dsn; role names it in application_name (shown
// in pg_stat_activity) unless the DSN sets one. Errors are the driver's.
func connect(ctx context.Context, dsn, role string) (*pgx.Conn, error) {
	config, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if config.RuntimeParams["application_name"] == "" {
		config.RuntimeParams["application_name"] = "workfence-example-go " + role
	}
	return pgx.ConnectConfig(ctx, config)
}

// worker is the claim / run / settle loop on the main connection.
type worker struct {
	cfg      Config
	log      *log.Logger
	pid      int32           // this process's id, written into examples.results.worker_pid
	stopping context.Context // done on SIGTERM/SIGINT; the parent of every job's context
	main     *pgx.Conn       // claims, final transactions, fails, releases
	hb       *heartbeat      // renews and listens, on its own connection
}

// run works cfg.Queue until stopping is done, then releases what it holds,
// logs "exit" and returns nil. An error (a connection that fails, a setting
// the server refuses) ends it at once.
func run(stopping context.Context, cfg Config, logger *log.Logger) error {
	w := &worker{cfg: cfg, log: logger, pid: int32(os.Getpid()), stopping: stopping}
	connectCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if w.main, err = connect(connectCtx, cfg.DSN, "main"); err != nil {
		return fmt.Errorf("main connection: %w", err)
	}
	defer closeConn(w.main)
	w.hb = newHeartbeat(cfg, logger)
	if err := w.hb.start(connectCtx); err != nil {
		return err
	}
	defer w.hb.shutdown()

	for stopping.Err() == nil {
		items, err := w.claim()
		if err != nil {
			return err
		}
		if err := w.workBatch(items); err != nil {
			return err
		}
	}
	w.log.Print("exit")
	return nil
}

// closeConn closes conn, waiting at most 5 s for the server to hear it.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Close(ctx)
}

// claim makes one long poll and returns the items claimed: none when the wait
// passed, or when a shutdown cancelled it (57014: the statement rolled back
// and claimed nothing). Each claimed item is logged and held by the heartbeat.
//
// The shutdown cancels the poll with a cancel request (PgConn.CancelRequest)
// rather than through the query's context: pgx v4 closes a connection whose
// query's context is cancelled, and rows the claim had already sent would be
// lost unread, their items left to wait out their leases. With the cancel
// request, a claim either ends with 57014 having claimed nothing, or returns
// its rows, and the caller releases them.
func (w *worker) claim() ([]*item, error) {
	if w.stopping.Err() != nil {
		return nil, nil
	}
	polling := make(chan struct{})
	var canceller sync.WaitGroup
	canceller.Add(1)
	go func() {
		defer canceller.Done()
		w.cancelOnStop(polling)
	}()
	items, err := w.queryClaim()
	close(polling)
	canceller.Wait()
	if err != nil {
		if errors.Is(err, ErrCancelled) && w.stopping.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("claim: %w", err)
	}
	for _, it := range items {
		w.log.Printf("claim id=%d epoch=%d attempt=%d", it.id, it.epoch, it.attempt)
		w.hb.add(it)
	}
	return items, nil
}

// queryClaim runs the long poll on the main connection and reads its rows.
func (w *worker) queryClaim() ([]*item, error) {
	ctx := context.Background()
	rows, err := w.main.Query(ctx, claimSQL,
		w.cfg.Queue, w.cfg.Owner, w.cfg.Lease.Seconds(), w.cfg.Batch, w.cfg.Wait.Seconds())
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var items []*item
	for rows.Next() {
		it := &item{}
		var payload []byte
		if err := rows.Scan(&it.id, &it.key, &payload, &it.epoch, &it.attempt); err != nil {
			return nil, err
		}
		it.job, it.jobErr = parseJob(payload)
		it.ctx, it.cancel = context.WithCancel(w.stopping)
		items = append(items, it)
	}
	return items, classify(rows.Err())
}

// cancelOnStop sends the server a cancel of the main connection's statement
// once stopping is done, and again every cancelRepeat, until polling is
// closed (the claim has returned).
func (w *worker) cancelOnStop(polling <-chan struct{}) {
	select {
	case <-polling:
		return
	case <-w.stopping.Done():
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := w.main.PgConn().CancelRequest(ctx); err != nil {
			w.log.Printf("cancel error=%v", err)
		}
		cancel()
		select {
		case <-polling:
			return
		case <-time.After(cancelRepeat):
		}
	}
}

// workBatch works the items one by one; once a shutdown is asked for, it
// releases those not started.
func (w *worker) workBatch(items []*item) error {
	for i, it := range items {
		if w.stopping.Err() != nil {
			for _, rest := range items[i:] {
				if err := w.release(rest); err != nil {
					return err
				}
			}
			return nil
		}
		if err := w.process(it); err != nil {
			return err
		}
	}
	return nil
}

// process runs one item's job and settles it: finish, fail, release (a
// shutdown cut the job short), or, when its lease was lost (a refused renew or
// a work_lease_lost notification, also while it waited its turn), abandon it:
// no finish, fail or release.
func (w *worker) process(it *item) error {
	defer it.cancel()
	if it.jobErr != nil {
		w.hb.drop(it)
		if it.lost.Load() {
			w.log.Printf("refused id=%d (lease lost)", it.id)
			return nil
		}
		return w.fail(it, it.jobErr.Error())
	}
	output, jobErr := it.job.run(it.ctx)
	// Before the final transaction: a renew in flight would wait on
	// work_assert's row lock.
	w.hb.drop(it)
	switch {
	case it.lost.Load():
		w.log.Printf("refused id=%d (lease lost)", it.id)
		return nil
	case errors.Is(jobErr, errInterrupted):
		return w.release(it)
	case jobErr != nil:
		return w.fail(it, jobErr.Error())
	default:
		return w.finish(it, output)
	}
}

// finish writes the job's effect and finishes the item in ONE transaction,
// fenced by work_assert. A 55000 from the assert (or from COMMIT) means the
// lease is lost: the transaction is rolled back, never committed after the
// error. A finish that returns false (possible only through a router, where
// work_assert holds no lock) is rolled back too, and logged as a refusal
// (clients/README.md: "a refusal at any step (finish false, work_assert
// 55000) is logged and the item abandoned"). The statements run under a
// context a shutdown does not cancel: a job that completed is still settled.
func (w *worker) finish(it *item, output int64) error {
	ctx := context.Background()
	tx, err := w.main.Begin(ctx)
	if err != nil {
		return fmt.Errorf("finish id=%d: BEGIN: %w", it.id, classify(err))
	}
	defer tx.Rollback(ctx) // after a COMMIT, a no-op
	if _, err := tx.Exec(ctx, assertSQL, it.id, w.cfg.Owner, it.epoch); err != nil {
		if err = classify(err); errors.Is(err, ErrLeaseLost) {
			return w.refused(ctx, tx, it)
		}
		return fmt.Errorf("finish id=%d: work_assert: %w", it.id, err)
	}
	if _, err := tx.Exec(ctx, insertSQL, it.id, it.epoch, w.pid, output); err != nil {
		return fmt.Errorf("finish id=%d: INSERT: %w", it.id, classify(err))
	}
	var finished bool
	result := map[string]int64{"output": output}
	if err := tx.QueryRow(ctx, finishSQL, it.id, w.cfg.Owner, it.epoch, result).Scan(&finished); err != nil {
		return fmt.Errorf("finish id=%d: work_finish: %w", it.id, classify(err))
	}
	if finished {
		if err := tx.Commit(ctx); err != nil {
			if err = classify(err); errors.Is(err, ErrLeaseLost) {
				w.log.Printf("refused id=%d (lease lost)", it.id)
				return nil
			}
			return fmt.Errorf("finish id=%d: COMMIT: %w", it.id, err)
		}
		w.log.Printf("finish id=%d epoch=%d ok", it.id, it.epoch)
		return nil
	}
	return w.refused(ctx, tx, it)
}

// refused rolls tx back after work_assert or work_finish refused the token,
// and logs the refusal.
func (w *worker) refused(ctx context.Context, tx pgx.Tx, it *item) error {
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("finish id=%d: ROLLBACK: %w", it.id, classify(err))
	}
	w.log.Printf("refused id=%d (lease lost)", it.id)
	return nil
}

// fail records the job's error with work_fail: retried after retryIn, or
// dead-lettered once the item's attempts are used up.
func (w *worker) fail(it *item, text string) error {
	var recorded bool
	err := w.main.QueryRow(context.Background(), failSQL,
		it.id, w.cfg.Owner, it.epoch, text, retryIn.Seconds()).Scan(&recorded)
	if err != nil {
		return fmt.Errorf("fail id=%d: %w", it.id, classify(err))
	}
	if recorded {
		w.log.Printf("fail id=%d epoch=%d error=%s", it.id, it.epoch, text)
	} else {
		w.log.Printf("refused id=%d (lease lost)", it.id)
	}
	return nil
}

// release hands the item back unfinished with work_release (shutdown). A
// cancel meant for the long poll can land on this statement (57014): it is
// sent again, at most 3 times in all.
func (w *worker) release(it *item) error {
	w.hb.drop(it)
	var released bool
	var err error
	for try := 0; try < 3; try++ {
		err = classify(w.main.QueryRow(context.Background(), releaseSQL,
			it.id, w.cfg.Owner, it.epoch).Scan(&released))
		if !errors.Is(err, ErrCancelled) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("release id=%d: %w", it.id, err)
	}
	if released {
		w.log.Printf("release id=%d epoch=%d", it.id, it.epoch)
	} else {
		w.log.Printf("refused id=%d (lease lost)", it.id)
	}
	return nil
}
