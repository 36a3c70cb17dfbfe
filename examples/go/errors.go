package main

// The SQLSTATEs the pg_workfence functions raise, as named Go errors.
//
// clients/README.md ("Errors") gives every worker library the same names for
// the same SQLSTATEs; this example follows it in Go's idiom: one sentinel error
// per SQLSTATE, to test with errors.Is, and one error type, *DBError, that
// carries the server's message, detail and hint. The sentinel-plus-wrapper
// shape is the standard library's own (io/fs.ErrNotExist inside *fs.PathError).

import (
	"errors"
	"fmt"

	"github.com/jackc/pgconn"
)

// The sentinel errors, one per SQLSTATE the functions raise (docs/contract.md).
// Test for them with errors.Is(err, ErrLeaseLost); errors.As(err, &dbErr) with
// a *DBError gives the server's message, detail and hint.
var (
	// ErrNullArgument is SQLSTATE 22004: a NULL where a value is required.
	ErrNullArgument = errors.New("workfence: null argument (SQLSTATE 22004)")
	// ErrInvalidArgument is SQLSTATE 22023: a bad queue, key, owner, lease,
	// interval or max_items.
	ErrInvalidArgument = errors.New("workfence: invalid argument (SQLSTATE 22023)")
	// ErrReadOnly is SQLSTATE 25006: a write on a hot standby (a claim after a
	// failover to a standby not yet promoted).
	ErrReadOnly = errors.New("workfence: read-only server (SQLSTATE 25006)")
	// ErrNoTransaction is SQLSTATE 25P01: work_assert outside a transaction block.
	ErrNoTransaction = errors.New("workfence: no transaction block (SQLSTATE 25P01)")
	// ErrSerializationFailure is SQLSTATE 40001: an enqueue that raced a purge
	// three times; retry it.
	ErrSerializationFailure = errors.New("workfence: serialization failure (SQLSTATE 40001)")
	// ErrNotPermitted is SQLSTATE 42501: a queue grant is missing
	// (docs/operations.md).
	ErrNotPermitted = errors.New("workfence: not permitted (SQLSTATE 42501)")
	// ErrUndefinedObject is SQLSTATE 42704: a grant naming an unknown role or
	// capability.
	ErrUndefinedObject = errors.New("workfence: undefined object (SQLSTATE 42704)")
	// ErrLeaseLost is SQLSTATE 55000: work_assert for a token that is not
	// current (also raised at COMMIT).
	ErrLeaseLost = errors.New("workfence: lease lost (SQLSTATE 55000)")
	// ErrCancelled is SQLSTATE 57014: a statement cancelled (the long poll on
	// shutdown).
	ErrCancelled = errors.New("workfence: statement cancelled (SQLSTATE 57014)")
)

// sqlStates maps each SQLSTATE of clients/README.md to its sentinel error.
var sqlStates = map[string]error{
	"22004": ErrNullArgument,
	"22023": ErrInvalidArgument,
	"25006": ErrReadOnly,
	"25P01": ErrNoTransaction,
	"40001": ErrSerializationFailure,
	"42501": ErrNotPermitted,
	"42704": ErrUndefinedObject,
	"55000": ErrLeaseLost,
	"57014": ErrCancelled,
}

// DBError is an error the server raised with one of the SQLSTATEs above.
//
// Kind is the sentinel error of its SQLSTATE (errors.Is(err, ErrLeaseLost)
// holds for a *DBError of kind ErrLeaseLost); Code, Message, Detail and Hint
// are the server's, kept as sent. Unwrap gives the driver's *pgconn.PgError.
type DBError struct {
	Kind    error  // the sentinel error of Code
	Code    string // the SQLSTATE, e.g. "55000"
	Message string // the server's primary message
	Detail  string // the server's DETAIL, "" when none (work_assert says why the token is not current)
	Hint    string // the server's HINT, "" when none
	pg      *pgconn.PgError
}

// Error reports the SQLSTATE and the server's message, detail and hint.
func (e *DBError) Error() string {
	text := fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.Code)
	if e.Detail != "" {
		text += " detail: " + e.Detail
	}
	if e.Hint != "" {
		text += " hint: " + e.Hint
	}
	return text
}

// Is reports whether target is the sentinel error of e's SQLSTATE.
func (e *DBError) Is(target error) bool {
	return target == e.Kind
}

// Unwrap returns the driver's error, a *pgconn.PgError.
func (e *DBError) Unwrap() error {
	return e.pg
}

// classify returns err as a *DBError when it is (or wraps) a server error with
// one of the SQLSTATEs of clients/README.md, else err unchanged (nil stays nil).
func classify(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	kind, known := sqlStates[pgErr.Code]
	if !known {
		return err
	}
	return &DBError{
		Kind:    kind,
		Code:    pgErr.Code,
		Message: pgErr.Message,
		Detail:  pgErr.Detail,
		Hint:    pgErr.Hint,
		pg:      pgErr,
	}
}
