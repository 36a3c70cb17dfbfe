package main

// Unit tests of the worker's logic that needs no database: settings, the
// stand-in job, the work_lease_lost payload and token matching, and the
// SQLSTATE mapping. The integration tests (integration_test.go) run the
// worker against a real cluster.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
)

// env returns a lookup function over vars, as os.LookupEnv would see them.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		value, set := vars[name]
		return value, set
	}
}

// host is a hostname function that returns name.
func host(name string) func() (string, error) {
	return func() (string, error) { return name, nil }
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := configFromEnv(env(map[string]string{"WORKFENCE_DSN": "host=db dbname=app"}), host("box-1"))
	if err != nil {
		t.Fatalf("configFromEnv: %v", err)
	}
	want := Config{
		DSN:   "host=db dbname=app",
		Queue: "examples",
		Owner: "box-1",
		Batch: 5,
		Lease: 6 * time.Second,
		Wait:  5 * time.Second,
	}
	if cfg != want {
		t.Fatalf("defaults: got %+v, want %+v", cfg, want)
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	cfg, err := configFromEnv(env(map[string]string{
		"WORKFENCE_DSN":           "postgres://u@db/app",
		"WORKFENCE_QUEUE":         "billing",
		"WORKFENCE_OWNER":         "routines/laptop",
		"WORKFENCE_BATCH":         " 12 ",
		"WORKFENCE_LEASE_SECONDS": "1.5",
		"WORKFENCE_WAIT_SECONDS":  "0",
	}), func() (string, error) { return "", errors.New("the hostname must not be asked for") })
	if err != nil {
		t.Fatalf("configFromEnv: %v", err)
	}
	want := Config{
		DSN:   "postgres://u@db/app",
		Queue: "billing",
		Owner: "routines/laptop",
		Batch: 12,
		Lease: 1500 * time.Millisecond,
		Wait:  0,
	}
	if cfg != want {
		t.Fatalf("got %+v, want %+v", cfg, want)
	}
}

func TestConfigRejectsBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name, value, mentions string
	}{
		{"WORKFENCE_DSN", "", "WORKFENCE_DSN"},
		{"WORKFENCE_BATCH", "five", "WORKFENCE_BATCH"},
		{"WORKFENCE_BATCH", "0", "1..1000"},
		{"WORKFENCE_BATCH", "1001", "1..1000"},
		{"WORKFENCE_LEASE_SECONDS", "0", "above 0"},
		{"WORKFENCE_LEASE_SECONDS", "-3", "above 0"},
		{"WORKFENCE_LEASE_SECONDS", "NaN", "WORKFENCE_LEASE_SECONDS"},
		{"WORKFENCE_LEASE_SECONDS", "1e300", "WORKFENCE_LEASE_SECONDS"},
		{"WORKFENCE_WAIT_SECONDS", "-1", "0 or more"},
		{"WORKFENCE_WAIT_SECONDS", "soon", "WORKFENCE_WAIT_SECONDS"},
	} {
		vars := map[string]string{"WORKFENCE_DSN": "host=db"}
		vars[tc.name] = tc.value
		_, err := configFromEnv(env(vars), host("box"))
		if err == nil || !strings.Contains(err.Error(), tc.mentions) {
			t.Errorf("%s=%q: got error %v, want one mentioning %q", tc.name, tc.value, err, tc.mentions)
		}
	}
	_, err := configFromEnv(env(map[string]string{}), host("box"))
	if err == nil || !strings.Contains(err.Error(), "WORKFENCE_DSN") {
		t.Errorf("no WORKFENCE_DSN: got %v", err)
	}
	_, err = configFromEnv(env(map[string]string{"WORKFENCE_DSN": "host=db"}),
		func() (string, error) { return "", errors.New("no uts") })
	if err == nil || !strings.Contains(err.Error(), "WORKFENCE_OWNER") {
		t.Errorf("no owner and no hostname: got %v", err)
	}
}

func TestParseJob(t *testing.T) {
	j, err := parseJob([]byte(`{"n": 7, "sleep_ms": 40, "fail": false}`))
	if err != nil {
		t.Fatalf("parseJob: %v", err)
	}
	if j.N != 7 || j.SleepMs != 40 || j.Fail || !j.renewed() {
		t.Fatalf("got %+v (renewed %v), want n=7 sleep_ms=40, renewed by default", j, j.renewed())
	}
	j, err = parseJob([]byte(`{"n": 7, "sleep_ms": 60000, "fail": false, "heartbeat": false}`))
	if err != nil || j.renewed() {
		t.Fatalf(`"heartbeat": false: got %+v, %v; want not renewed`, j, err)
	}
	j, err = parseJob([]byte(`{"n": 7, "heartbeat": true}`))
	if err != nil || !j.renewed() {
		t.Fatalf(`"heartbeat": true: got %+v, %v; want renewed`, j, err)
	}
	for _, bad := range []string{`[]`, `{"n": "seven"}`, `{"sleep_ms": 5}`, `not json`} {
		if _, err := parseJob([]byte(bad)); err == nil || !strings.Contains(err.Error(), "bad payload") {
			t.Errorf("parseJob(%s): got %v, want a bad payload error", bad, err)
		}
	}
}

func TestJobRunOutcomes(t *testing.T) {
	ctx := context.Background()
	if out, err := (job{N: 7}).run(ctx); err != nil || out != 49 {
		t.Errorf("n=7: got %d, %v; want 49", out, err)
	}
	if _, err := (job{N: 10, Fail: true}).run(ctx); err == nil || err.Error() != "job 10 failed on purpose" {
		t.Errorf("fail: got %v, want \"job 10 failed on purpose\"", err)
	}
	if out, err := (job{N: -maxSquarable}).run(ctx); err != nil || out != maxSquarable*maxSquarable {
		t.Errorf("largest n: got %d, %v", out, err)
	}
	if _, err := (job{N: maxSquarable + 1}).run(ctx); err == nil || !strings.Contains(err.Error(), "bigint") {
		t.Errorf("n*n overflow: got %v, want an error", err)
	}
}

func TestJobRunStopsWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := (job{N: 3, SleepMs: 60_000}).run(ctx)
		ended <- err
	}()
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, errInterrupted) {
			t.Fatalf("got %v, want errInterrupted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a job of 60 s did not stop within 5 s of its context's cancel")
	}
}

func TestParseLostToken(t *testing.T) {
	token, err := parseLostToken(`{"id": 7, "queue": "examples", "key": "item-7", "owner": "examples/shared-host", "epoch": 4398046511104}`)
	if err != nil || token != (lostToken{ID: 7, Epoch: 4398046511104}) {
		t.Fatalf("got %+v, %v; want id 7 epoch 4398046511104", token, err)
	}
	for _, bad := range []string{`{"id": 7}`, `{"epoch": 3}`, `{"id": "7", "epoch": 3}`, `[7, 3]`, ``} {
		if _, err := parseLostToken(bad); err == nil {
			t.Errorf("parseLostToken(%q): no error", bad)
		}
	}
}

// lines is a log sink that keeps the lines written to it (safe for goroutines).
type lines struct {
	mu   sync.Mutex
	text strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.Write(p)
}

// all returns the complete lines written so far.
func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := l.text.String()
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		return strings.Split(text[:i], "\n")
	}
	return nil
}

// heldItem returns an item with token (id, epoch), its job context live.
func heldItem(id, epoch int64) *item {
	it := &item{id: id, epoch: epoch, job: job{N: 1}}
	it.ctx, it.cancel = context.WithCancel(context.Background())
	return it
}

func TestNotificationStopsOnlyTheMatchingToken(t *testing.T) {
	sink := &lines{}
	h := newHeartbeat(Config{Lease: 3 * time.Second}, log.New(sink, "", 0))
	mine, other := heldItem(7, 42), heldItem(8, 50)
	h.add(mine)
	h.add(other)

	// Another epoch of a held id (a token of ours already superseded, or a
	// copy sharing the owner name), and an id not held: nothing happens.
	h.notified(`{"id": 7, "queue": "examples", "key": "k7", "owner": "o", "epoch": 41}`)
	h.notified(`{"id": 9, "queue": "examples", "key": "k9", "owner": "o", "epoch": 42}`)
	h.notified(`not json`)
	if mine.lost.Load() || other.lost.Load() || mine.ctx.Err() != nil || !h.holding(mine) {
		t.Fatal("a notification not naming a held token stopped a job")
	}

	h.notified(`{"id": 7, "queue": "examples", "key": "k7", "owner": "someone else", "epoch": 42}`)
	if !mine.lost.Load() || mine.ctx.Err() == nil {
		t.Fatal("the notification naming (7, 42) did not stop its job")
	}
	if h.holding(mine) {
		t.Fatal("the lost item is still held (it would be renewed)")
	}
	if other.lost.Load() || other.ctx.Err() != nil || !h.holding(other) {
		t.Fatal("the notification for item 7 stopped item 8")
	}
	// The same notification again (it is a hint; duplicates are harmless).
	h.notified(`{"id": 7, "queue": "examples", "key": "k7", "owner": "o", "epoch": 42}`)

	got := sink.all()
	want := []string{
		`listen error=unreadable work_lease_lost payload "not json": invalid character 'o' in literal null (expecting 'u')`,
		"lease lost (notified) id=7 epoch=42",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log lines:\n got %q\nwant %q", got, want)
	}
}

func TestDropForgetsOnlyThatClaim(t *testing.T) {
	h := newHeartbeat(Config{Lease: time.Second}, log.New(&lines{}, "", 0))
	old, again := heldItem(7, 42), heldItem(7, 57)
	h.add(old)
	h.add(again) // the same item claimed again (released, then re-claimed)
	h.drop(old)
	if !h.holding(again) {
		t.Fatal("dropping the older claim forgot the newer claim of the same item")
	}
	h.drop(again)
	if h.holding(again) {
		t.Fatal("drop did not forget the item")
	}
}

func TestRenewedFollowsThePayload(t *testing.T) {
	stalled := false
	if (&item{job: job{Heartbeat: &stalled}}).renewed() {
		t.Error(`"heartbeat": false is renewed`)
	}
	if !(&item{jobErr: errors.New("bad payload")}).renewed() {
		t.Error("an item with an unreadable payload is not renewed until it fails")
	}
}

func TestClassifyMapsEverySQLState(t *testing.T) {
	for code, want := range map[string]error{
		"22004": ErrNullArgument,
		"22023": ErrInvalidArgument,
		"25006": ErrReadOnly,
		"25P01": ErrNoTransaction,
		"40001": ErrSerializationFailure,
		"42501": ErrNotPermitted,
		"42704": ErrUndefinedObject,
		"55000": ErrLeaseLost,
		"57014": ErrCancelled,
	} {
		pg := &pgconn.PgError{Severity: "ERROR", Code: code, Message: "lease lost",
			Detail: "superseded by epoch 9", Hint: "claim the item again"}
		err := classify(fmt.Errorf("work_assert: %w", pg))
		if !errors.Is(err, want) {
			t.Errorf("%s: %v is not %v", code, err, want)
		}
		for _, other := range sqlStates {
			if other != want && errors.Is(err, other) {
				t.Errorf("%s: %v is also %v", code, err, other)
			}
		}
		var dbErr *DBError
		if !errors.As(err, &dbErr) || dbErr.Code != code || dbErr.Message != "lease lost" ||
			dbErr.Detail != "superseded by epoch 9" || dbErr.Hint != "claim the item again" {
			t.Errorf("%s: the server's message, detail and hint are not kept: %#v", code, dbErr)
		}
		var back *pgconn.PgError
		if !errors.As(err, &back) || back != pg {
			t.Errorf("%s: the driver's error does not unwrap", code)
		}
		if text := err.Error(); !strings.Contains(text, code) || !strings.Contains(text, "superseded by epoch 9") {
			t.Errorf("%s: Error() = %q lacks the SQLSTATE or the detail", code, text)
		}
	}
}

func TestClassifyLeavesOtherErrorsAlone(t *testing.T) {
	if classify(nil) != nil {
		t.Error("classify(nil) is not nil")
	}
	plain := errors.New("connection reset")
	if classify(plain) != plain {
		t.Error("a non-server error changed")
	}
	unknown := &pgconn.PgError{Code: "23505", Message: "duplicate key"}
	if got := classify(unknown); got != unknown {
		t.Errorf("an unmapped SQLSTATE changed: %v", got)
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"host=127.0.0.1 port=5433 user=postgres dbname=workfence_clients",
			"host=127.0.0.1 port=5433 user=postgres dbname=workfence_clients dbname='other'"},
		{"postgres://postgres@127.0.0.1:5433/workfence_clients?sslmode=disable",
			"postgres://postgres@127.0.0.1:5433/other?sslmode=disable"},
	} {
		got, err := withDatabase(tc.dsn, "other")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q): got %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
	}
}
