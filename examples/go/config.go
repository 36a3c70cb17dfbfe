package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config holds the worker's settings, read from WORKFENCE_* environment
// variables by configFromEnv (the same variables as every example worker,
// examples/README.md).
type Config struct {
	DSN   string        // WORKFENCE_DSN: a libpq connection string (keyword=value or URL); required
	Queue string        // WORKFENCE_QUEUE: the queue to work (default "examples")
	Owner string        // WORKFENCE_OWNER: the owner name of every claim (default: the hostname); not an identity, the epoch fences
	Batch int32         // WORKFENCE_BATCH: max_items per claim, 1..1000 (default 5)
	Lease time.Duration // WORKFENCE_LEASE_SECONDS: the lease each claim and renew asks for (default 6 s); renewed every Lease/3
	Wait  time.Duration // WORKFENCE_WAIT_SECONDS: the long poll's wait per claim (default 5 s)
}

// The defaults of the optional settings.
const (
	defaultQueue        = "examples"
	defaultBatch        = 5
	defaultLeaseSeconds = 6.0
	defaultWaitSeconds  = 5.0
)

// configFromEnv reads the settings through lookup (os.LookupEnv outside tests).
// hostname gives the default owner (os.Hostname). It fails when WORKFENCE_DSN
// is missing or empty, or a value does not parse or is out of range: the
// batch 1..1000, the lease above 0, the wait 0 or more (the server checks its
// arguments again; these also size the worker's own timers).
func configFromEnv(lookup func(string) (string, bool), hostname func() (string, error)) (Config, error) {
	dsn, _ := lookup("WORKFENCE_DSN")
	if strings.TrimSpace(dsn) == "" {
		return Config{}, errors.New("set WORKFENCE_DSN to a libpq connection string")
	}
	cfg := Config{DSN: dsn, Queue: defaultQueue}
	if queue, set := lookup("WORKFENCE_QUEUE"); set && queue != "" {
		cfg.Queue = queue
	}
	if owner, set := lookup("WORKFENCE_OWNER"); set && owner != "" {
		cfg.Owner = owner
	} else {
		host, err := hostname()
		if err != nil {
			return Config{}, fmt.Errorf("WORKFENCE_OWNER is not set and the hostname is unknown: %w", err)
		}
		cfg.Owner = host
	}

	batch, err := intSetting(lookup, "WORKFENCE_BATCH", defaultBatch)
	if err != nil {
		return Config{}, err
	}
	if batch < 1 || batch > 1000 {
		return Config{}, fmt.Errorf("WORKFENCE_BATCH=%d: must be 1..1000", batch)
	}
	cfg.Batch = int32(batch)

	lease, err := secondsSetting(lookup, "WORKFENCE_LEASE_SECONDS", defaultLeaseSeconds)
	if err != nil {
		return Config{}, err
	}
	if lease <= 0 {
		return Config{}, fmt.Errorf("WORKFENCE_LEASE_SECONDS=%v: must be above 0", lease.Seconds())
	}
	cfg.Lease = lease

	wait, err := secondsSetting(lookup, "WORKFENCE_WAIT_SECONDS", defaultWaitSeconds)
	if err != nil {
		return Config{}, err
	}
	if wait < 0 {
		return Config{}, fmt.Errorf("WORKFENCE_WAIT_SECONDS=%v: must be 0 or more", wait.Seconds())
	}
	cfg.Wait = wait
	return cfg, nil
}

// configFromProcess reads the settings from this process's environment, with
// the hostname as the default owner.
func configFromProcess() (Config, error) {
	return configFromEnv(os.LookupEnv, os.Hostname)
}

// intSetting is the integer in variable name, or def when it is unset or empty.
func intSetting(lookup func(string) (string, bool), name string, def int) (int, error) {
	text, set := lookup(name)
	if !set || strings.TrimSpace(text) == "" {
		return def, nil
	}
	value, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", name, text)
	}
	return value, nil
}

// secondsSetting is the number of seconds (fractions allowed) in variable
// name as a duration, or def seconds when it is unset or empty.
func secondsSetting(lookup func(string) (string, bool), name string, def float64) (time.Duration, error) {
	seconds := def
	if text, set := lookup(name); set && strings.TrimSpace(text) != "" {
		parsed, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil || math.IsNaN(parsed) || math.IsInf(parsed, 0) || math.Abs(parsed) > 3600*24*7 {
			return 0, fmt.Errorf("%s=%q: not a number of seconds (at most 7 days)", name, text)
		}
		seconds = parsed
	}
	return time.Duration(seconds * float64(time.Second)), nil
}
