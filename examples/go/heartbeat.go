package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v4"
)

// renewSQL moves the lease of one token to now + $4 seconds; false when the
// token is not current (docs/contract.md, work_renew).
const renewSQL = `SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4))`

// leaseLostChannel is the channel on which a claim that supersedes a lapsed
// lease names the old token (docs/contract.md, NOTIFY work_lease_lost).
const leaseLostChannel = "work_lease_lost"

// item is one claimed item: its token (with the worker's owner), its job and
// the context its job runs under.
type item struct {
	id      int64
	key     string
	epoch   int64 // the fencing token this claim handed out
	attempt int32
	job     job   // the job, when the payload could be read
	jobErr  error // why the payload could not be read (the item then fails)
	// ctx is the job's context: cancelled when the lease is lost (a refused
	// renew or a matching notification) or the worker shuts down.
	ctx    context.Context
	cancel context.CancelFunc
	lost   atomic.Bool // set (before ctx is cancelled) when the lease is lost
}

// renewed reports whether the heartbeat renews this item (see job.Heartbeat).
func (it *item) renewed() bool {
	return it.jobErr != nil || it.job.renewed()
}

// lose marks the lease lost and stops the job: the item is abandoned, with no
// finish, fail or release.
func (it *item) lose() {
	it.lost.Store(true)
	it.cancel()
}

// lostToken is the part of a work_lease_lost payload the worker matches on:
// the superseded token's id and epoch. (The payload also has queue, key and
// owner; the owner is never matched, since other processes share it.)
type lostToken struct {
	ID    int64
	Epoch int64
}

// parseLostToken reads a work_lease_lost payload, JSON {"id", "queue", "key",
// "owner", "epoch"}; an error when it is not JSON or lacks an integer id or epoch.
func parseLostToken(payload string) (lostToken, error) {
	var raw struct {
		ID    *int64 `json:"id"`
		Epoch *int64 `json:"epoch"`
	}
	if err := json.Unmarshal([]byte(payload), &raw); err != nil {
		return lostToken{}, err
	}
	if raw.ID == nil || raw.Epoch == nil {
		return lostToken{}, errors.New("no id or epoch")
	}
	return lostToken{ID: *raw.ID, Epoch: *raw.Epoch}, nil
}

// heartbeat renews the lease of every item the worker holds every Lease/3, on
// a connection of its own, and LISTENs on work_lease_lost on that connection
// in between.
//
// A refused renew, or a notification naming a held token (id AND epoch, never
// the owner name, which other copies share), marks that item lost and cancels
// its job's context. The notification is a hint that arrives when the
// re-claim commits; the refused renew and the final work_assert stay the
// ground truth. Only the heartbeat's goroutine uses its connection: between
// renews it waits in pgx's WaitForNotification under a context whose
// deadline is the next renew (a deadline leaves a pgx v4 connection usable,
// and notifications that arrive during a renew are buffered by pgx for the
// next wait).
type heartbeat struct {
	cfg     Config
	log     *log.Logger
	connect func(context.Context) (*pgx.Conn, error) // opens a connection and LISTENs
	conn    *pgx.Conn

	mu   sync.Mutex // held while renewing or matching an item; guards held
	held map[int64]*item

	stop context.CancelFunc // ends run
	done chan struct{}      // closed when run has returned
}

// newHeartbeat returns a heartbeat holding nothing, not connected, not running
// (start connects and runs it).
func newHeartbeat(cfg Config, logger *log.Logger) *heartbeat {
	return &heartbeat{
		cfg:  cfg,
		log:  logger,
		held: make(map[int64]*item),
		done: make(chan struct{}),
		connect: func(ctx context.Context) (*pgx.Conn, error) {
			conn, err := connect(ctx, cfg.DSN, "heartbeat")
			if err != nil {
				return nil, err
			}
			// A constant channel name: nothing to bind (LISTEN takes no parameters).
			if _, err := conn.Exec(ctx, "LISTEN "+leaseLostChannel); err != nil {
				conn.Close(ctx)
				return nil, fmt.Errorf("LISTEN %s: %w", leaseLostChannel, classify(err))
			}
			return conn, nil
		},
	}
}

// start opens the heartbeat's connection (LISTENing on work_lease_lost) and
// runs the heartbeat in a goroutine until shutdown. The error is the
// connection's.
func (h *heartbeat) start(ctx context.Context) error {
	conn, err := h.connect(ctx)
	if err != nil {
		return fmt.Errorf("heartbeat connection: %w", err)
	}
	h.conn = conn
	runCtx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go h.run(runCtx)
	return nil
}

// shutdown stops the heartbeat (at once, or after a renew in flight) and
// closes its connection.
func (h *heartbeat) shutdown() {
	h.stop()
	<-h.done
	if h.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.conn.Close(ctx)
	}
}

// add holds it: renews it (unless its payload says not to) and watches for
// its loss.
func (h *heartbeat) add(it *item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[it.id] = it
}

// drop stops renewing and watching it; it returns after a renew of it in
// flight, so that no renew waits on the row lock of the final transaction
// (where it would be refused).
func (h *heartbeat) drop(it *item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[it.id] == it {
		delete(h.held, it.id)
	}
}

// holding reports whether it is held (for tests).
func (h *heartbeat) holding(it *item) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[it.id] == it
}

// run renews every Lease/3 and waits for notifications in between, until ctx
// is done.
func (h *heartbeat) run(ctx context.Context) {
	defer close(h.done)
	every := h.cfg.Lease / 3
	due := time.Now().Add(every)
	for ctx.Err() == nil {
		if left := time.Until(due); left > 0 {
			h.listen(ctx, left)
			continue
		}
		h.renewAll(ctx)
		due = time.Now().Add(every)
	}
}

// listen handles the notifications that arrive within d (or until ctx is
// done). A broken connection is replaced (LISTENing again); meanwhile only
// the hint is missing, the renews still tell a lost lease.
func (h *heartbeat) listen(ctx context.Context, d time.Duration) {
	wait, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if h.conn == nil || h.conn.IsClosed() {
		h.reconnect(wait)
		return
	}
	note, err := h.conn.WaitForNotification(wait)
	if note != nil && note.Channel == leaseLostChannel {
		h.notified(note.Payload)
	}
	if err == nil || (wait.Err() != nil && !h.conn.IsClosed()) {
		return // a notification, or the wait is over
	}
	h.log.Printf("listen error=%v", classify(err))
	if !h.conn.IsClosed() {
		<-wait.Done() // do not spin on an error that repeats
	}
}

// reconnect replaces the heartbeat's broken connection; on failure it logs
// and waits until ctx is done before the next try.
func (h *heartbeat) reconnect(ctx context.Context) {
	conn, err := h.connect(ctx)
	if err != nil {
		h.log.Printf("heartbeat reconnect error=%v", err)
		<-ctx.Done()
		return
	}
	h.conn = conn
}

// notified handles a work_lease_lost payload: if it names a held token (id
// and epoch), the item is lost and its job stopped.
func (h *heartbeat) notified(payload string) {
	token, err := parseLostToken(payload)
	if err != nil {
		h.log.Printf("listen error=unreadable %s payload %q: %v", leaseLostChannel, payload, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	it := h.held[token.ID]
	if it == nil || it.epoch != token.Epoch {
		return // another worker's token, or one of ours already settled
	}
	h.log.Printf("lease lost (notified) id=%d epoch=%d", it.id, it.epoch)
	h.lose(it)
}

// lose forgets it and stops its job (the caller holds mu).
func (h *heartbeat) lose(it *item) {
	delete(h.held, it.id)
	it.lose()
}

// renewAll renews every held item that is to be renewed, one at a time, each
// under mu so that drop waits for it.
func (h *heartbeat) renewAll(ctx context.Context) {
	h.mu.Lock()
	items := make([]*item, 0, len(h.held))
	for _, it := range h.held {
		items = append(items, it)
	}
	h.mu.Unlock()
	for _, it := range items {
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		if h.held[it.id] == it && it.renewed() {
			h.renew(it)
		}
		h.mu.Unlock()
	}
}

// renew renews one item's lease (the caller holds mu); a refusal loses the
// item. An error (a broken connection, a renew slower than the lease) is
// logged and does not: the final work_assert decides.
func (h *heartbeat) renew(it *item) {
	if h.conn == nil || h.conn.IsClosed() {
		h.log.Printf("renew id=%d error=no connection", it.id)
		return
	}
	// Not the heartbeat's own context: a shutdown lets a renew in flight end
	// (pgx closes a connection whose query's context is cancelled).
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Lease)
	defer cancel()
	var ok bool
	err := h.conn.QueryRow(ctx, renewSQL, it.id, h.cfg.Owner, it.epoch, h.cfg.Lease.Seconds()).Scan(&ok)
	if err != nil {
		h.log.Printf("renew id=%d error=%v", it.id, classify(err))
		return
	}
	if ok {
		h.log.Printf("renew id=%d ok", it.id)
		return
	}
	h.log.Printf("renew id=%d refused", it.id)
	h.lose(it)
}
