// What every Go driver shares: the spec it reads (JSON: the first argument, else standard
// input), the JSON lines it prints (one object an event, the last {"event": "done"}), and
// typed reads of the spec's loosely typed fields. The build copies this file beside each
// driver's main.go (tests/support/clients.py), so both stay package main with no module
// of their own to share.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

type object = map[string]any

var outMu sync.Mutex

func emit(event string, fields object) {
	line := object{"event": event}
	for k, v := range fields {
		line[k] = v
	}
	data, err := json.Marshal(line)
	if err != nil {
		data, _ = json.Marshal(object{"event": "bad_event", "message": err.Error()})
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(data, '\n'))
}

func failed(event string, err error, fields object) {
	if fields == nil {
		fields = object{}
	}
	fields["type"] = fmt.Sprintf("%T", err)
	fields["message"] = err.Error()
	emit(event, fields)
}

func str(o object, key, fallback string) string {
	if v, ok := o[key].(string); ok {
		return v
	}
	return fallback
}

func num(o object, key string, fallback float64) float64 {
	if v, ok := o[key].(float64); ok {
		return v
	}
	return fallback
}

func flag(o object, key string) bool {
	v, _ := o[key].(bool)
	return v
}

func list(o object, key string) []string {
	var out []string
	switch v := o[key].(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, item := range v {
			if s, ok := item.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func objects(o object, key string) []object {
	var out []object
	if items, ok := o[key].([]any); ok {
		for _, item := range items {
			if m, ok := item.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// readSpec reads the spec: the first argument, or standard input when there is none or it is "-".
func readSpec() (object, error) {
	var raw []byte
	var err error
	if len(os.Args) > 1 && os.Args[1] != "-" {
		raw = []byte(os.Args[1])
	} else {
		raw, err = io.ReadAll(os.Stdin)
	}
	var spec object
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	return spec, err
}

// runSteps runs each step of the spec with the function its "do" names, reports each
// failure as a step_failed event, prints done and exits 0 (the events say what failed).
func runSteps(spec object, specErr error, steps map[string]func(object) error) {
	failedSteps := 0
	if specErr != nil {
		failed("step_failed", specErr, object{"step": "spec"})
		failedSteps++
	}
	for _, step := range objects(spec, "steps") {
		what := str(step, "do", "")
		var stepErr error
		if run, known := steps[what]; known {
			stepErr = run(step)
		} else {
			stepErr = fmt.Errorf("unknown step %q", what)
		}
		if stepErr != nil {
			failed("step_failed", stepErr, object{"step": what})
			failedSteps++
		}
	}
	emit("done", object{"failed_steps": failedSteps})
	os.Exit(0)
}

// monotonic is seconds on CLOCK_MONOTONIC, the clock a failover drill kills by (Python's
// time.monotonic): time.Now's monotonic reading cannot be read as a number.
func monotonic() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// checkAnswerLinger is how long a transaction step keeps its producer after the checks it
// waited for, unless the step says (``linger_s``): the client answers a check after its
// checker returns, so a producer shut down at once can take the answer with it; 3 s
// outlasts the tests' check interval, so an answer lost anyway is asked for again.
func checkAnswerLinger(step object) float64 {
	if num(step, "checks", 0) > 0 {
		return 3
	}
	return 0
}
