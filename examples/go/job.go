package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// job is the stand-in work an item's payload describes:
// {"n": 7, "sleep_ms": 40, "fail": false, "heartbeat": true}.
type job struct {
	N       int64 `json:"n"`        // the input; the output is N*N
	SleepMs int64 `json:"sleep_ms"` // how long the simulated work takes, in milliseconds
	Fail    bool  `json:"fail"`     // raise an error instead of producing the output
	// Heartbeat false: the heartbeat does not renew this item, standing in for
	// a worker that stalls (a GC pause, a network partition) so that a test can
	// make its lease lapse while the job still runs. Omitted: true.
	Heartbeat *bool `json:"heartbeat"`
}

// parseJob reads an item's payload (JSON text). A payload that is not a JSON
// object with an integer "n" is an error (the worker records it with work_fail).
func parseJob(payload []byte) (job, error) {
	var j job
	if err := json.Unmarshal(payload, &j); err != nil {
		return job{}, fmt.Errorf("bad payload %s: %v", payload, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(payload, &fields); err != nil || fields["n"] == nil {
		return job{}, fmt.Errorf("bad payload %s: no \"n\"", payload)
	}
	return j, nil
}

// renewed reports whether the heartbeat renews the item's lease while the job
// runs: unless the payload says "heartbeat": false.
func (j job) renewed() bool {
	return j.Heartbeat == nil || *j.Heartbeat
}

// maxSquarable is the largest n whose square fits an int64 (a bigint).
const maxSquarable = 3037000499

// errInterrupted is what run returns when ctx ended before the job did (its
// lease was lost, or the worker is shutting down).
var errInterrupted = fmt.Errorf("job interrupted")

// run does the work: sleeps SleepMs (cut short when ctx is done, then it
// returns errInterrupted), then fails on purpose if Fail, else returns N*N.
func (j job) run(ctx context.Context) (int64, error) {
	timer := time.NewTimer(time.Duration(j.SleepMs) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return 0, errInterrupted
	case <-timer.C:
	}
	if j.Fail {
		return 0, fmt.Errorf("job %d failed on purpose", j.N)
	}
	if j.N > maxSquarable || j.N < -maxSquarable {
		return 0, fmt.Errorf("job %d: n*n does not fit a bigint", j.N)
	}
	return j.N * j.N, nil
}
