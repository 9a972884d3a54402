// A failover drill's load, as every Go driver runs it (bench/official_failover.py's for
// the Python client): one send at a time until the stop file exists, a consumer
// recording what it receives, then the drain: until every acknowledged message was
// received, or nothing new came for drain_idle_s (15), or drain_s (300) passed since the
// stop. Events: ready (t), sent / send_failed (body, t0, t1); the driver's consumer emits
// received (body, t, attempt).
package main

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

type drill struct {
	step      object
	mu        sync.Mutex
	acked     map[string]bool
	received  map[string]bool
	lastNew   float64
	stopped   atomic.Bool
	producing chan struct{}
	until     atomic.Value // float64: the drain's deadline, set at the stop
}

func newDrill(step object) *drill {
	d := &drill{step: step, acked: map[string]bool{}, received: map[string]bool{}}
	d.lastNew = monotonic()
	d.producing = make(chan struct{})
	d.until.Store(float64(1e18))
	return d
}

// produce sends m-0, m-1... with send, one at a time, until the stop; pause_ms between.
func (d *drill) produce(send func(body string) error) {
	pause := time.Duration(num(d.step, "pause_ms", 0)) * time.Millisecond
	go func() {
		defer close(d.producing)
		for i := 0; !d.stopped.Load(); i++ {
			body := fmt.Sprintf("m-%d", i)
			t0 := monotonic()
			if err := send(body); err != nil {
				failed("send_failed", err, object{"body": body, "t0": t0, "t1": monotonic()})
			} else {
				d.mu.Lock()
				d.acked[body] = true
				d.mu.Unlock()
				emit("sent", object{"body": body, "t0": t0, "t1": monotonic()})
			}
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
}

// receive records a delivery and emits it.
func (d *drill) receive(body string, attempt int) {
	d.mu.Lock()
	if !d.received[body] {
		d.received[body] = true
		d.lastNew = monotonic()
	}
	d.mu.Unlock()
	emit("received", object{"body": body, "t": monotonic(), "attempt": attempt})
}

// untilStopped emits ready, waits for the stop file, then stops the sends and waits for
// the last one's answer.
func (d *drill) untilStopped() {
	emit("ready", object{"t": monotonic()})
	for {
		if _, err := os.Stat(str(d.step, "stop_file", "")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.until.Store(monotonic() + num(d.step, "drain_s", 300))
	d.stopped.Store(true)
	<-d.producing
}

// drained says whether the drain is over (never before the sends stopped and the last
// one was answered).
func (d *drill) drained() bool {
	if !d.stopped.Load() {
		return false
	}
	select {
	case <-d.producing:
	default:
		return false // its last send may still be answered
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := monotonic()
	if now > d.until.Load().(float64) || now-d.lastNew > num(d.step, "drain_idle_s", 15) {
		return true
	}
	for body := range d.acked {
		if !d.received[body] {
			return false
		}
	}
	return true
}
