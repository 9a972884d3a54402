// Drives the official Go 5.x gRPC client (github.com/apache/rocketmq-clients/golang/v5)
// through the steps of a JSON spec (the first argument, else standard input) and prints
// what happened as JSON lines, the last {"event": "done"}.
//
//	{"endpoints": "host:port", "steps": [
//	  {"do": "produce", "topics": [..], "messages": [{"topic", "body", "tag", "keys": [..],
//	       "properties": {..}, "group" (FIFO), "delay_ms" (DELAY), "async": bool}]},
//	  {"do": "transaction", "topic", "messages": [{"body", "tag", "keys", "properties",
//	       "end": "commit|rollback|none"}], "checker": "COMMIT|ROLLBACK|UNKNOWN",
//	       "checks": n, "wait_for_check_s": s, "linger_s" (after the checks; 3 s by default)},
//	  {"do": "simple", "group", "topic", "expression", "sql": bool, "await_s",
//	       "ops": [{"op": "receive", "count", "max", "invisible_s", "deadline_s", "ack"},
//	               {"op": "ack", "bodies": [..]}, {"op": "change", "body", "invisible_s"},
//	               {"op": "sleep", "s"}]},
//	  {"do": "push", "group", "topic", "expression", "sql": bool, "fail": [bodies],
//	       "fail_attempts": n, "expect": [bodies], "threads", "deadline_s", "linger_s"}
//	       (or "consumers": [{"group", "topic", ...}, ..] with "deadline_s", "linger_s")},
//	  {"do": "load", "topic", "group", "stop_file", "pause_ms", "await_s", "invisible_s",
//	       "drain_idle_s", "drain_s"} (a failover drill's load: func load)]}
//
// Events: sent, send_failed, committed, rolled_back, end_failed, checked, received,
// receive_failed, acked, ack_failed, changed, change_failed, consumed, push_waited,
// close_failed, step_failed, done. A push step's listener fails the bodies in "fail"
// (FAILURE: a normal group's is nacked and redelivered by the server, a FIFO group's
// retried by the client, each dead-lettered after its last attempt) and succeeds the
// rest; the step ends when every "expect" body succeeded and every "fail" body failed
// "fail_attempts" times, or at its deadline (push_waited says which, per consumer).
//
// The client speaks TLS unless the environment sets rocketmq.client.enableSsl=false
// (any certificate is accepted).
package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

type driver struct {
	endpoints string
}

func (d *driver) config(group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      d.endpoints,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{},
	}
}

func message(topic string, m object) *rmq.Message {
	msg := &rmq.Message{Topic: topic, Body: []byte(str(m, "body", ""))}
	if tag := str(m, "tag", ""); tag != "" {
		msg.SetTag(tag)
	}
	if keys := list(m, "keys"); len(keys) > 0 {
		msg.SetKeys(keys...)
	}
	if group := str(m, "group", ""); group != "" {
		msg.SetMessageGroup(group)
	}
	if delay, ok := m["delay_ms"].(float64); ok {
		msg.SetDelayTimestamp(time.Now().Add(time.Duration(delay) * time.Millisecond))
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for k, v := range props {
			msg.AddProperty(k, fmt.Sprint(v))
		}
	}
	return msg
}

func sent(body string, receipts []*rmq.SendReceipt, async bool) {
	for _, r := range receipts {
		emit("sent", object{
			"body": body, "id": r.MessageID, "offset": r.Offset,
			"transaction_id": r.TransactionId, "async": async,
		})
	}
}

func (d *driver) produce(step object) error {
	messages := objects(step, "messages")
	topics := list(step, "topics")
	if len(topics) == 0 {
		seen := map[string]bool{}
		for _, m := range messages {
			if t := str(m, "topic", ""); !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	producer, err := rmq.NewProducer(d.config(""), rmq.WithTopics(topics...))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	var pending sync.WaitGroup
	for _, m := range messages {
		body := str(m, "body", "")
		msg := message(str(m, "topic", ""), m)
		if flag(m, "async") {
			pending.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			producer.SendAsync(ctx, msg, func(_ context.Context, receipts []*rmq.SendReceipt, err error) {
				defer pending.Done()
				defer cancel()
				if err != nil {
					failed("send_failed", err, object{"body": body})
				} else {
					sent(body, receipts, true)
				}
			})
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		receipts, err := producer.Send(ctx, msg)
		cancel()
		if err != nil {
			failed("send_failed", err, object{"body": body})
		} else {
			sent(body, receipts, false)
		}
	}
	pending.Wait()
	return nil
}

func (d *driver) transaction(step object) error {
	topic := str(step, "topic", "")
	answers := map[string]rmq.TransactionResolution{
		"COMMIT": rmq.COMMIT, "ROLLBACK": rmq.ROLLBACK, "UNKNOWN": rmq.UNKNOWN,
	}
	answerName := str(step, "checker", "COMMIT")
	var checks atomic.Int64
	checker := &rmq.TransactionChecker{Check: func(view *rmq.MessageView) rmq.TransactionResolution {
		checks.Add(1)
		emit("checked", object{"body": string(view.GetBody()), "id": view.GetMessageId(), "answer": answerName})
		return answers[answerName]
	}}
	producer, err := rmq.NewProducer(d.config(""), rmq.WithTopics(topic), rmq.WithTransactionChecker(checker))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	for _, m := range objects(step, "messages") {
		body := str(m, "body", "")
		tx := producer.BeginTransaction()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		receipts, err := producer.SendWithTransaction(ctx, message(topic, m), tx)
		cancel()
		if err != nil {
			failed("send_failed", err, object{"body": body})
			continue
		}
		sent(body, receipts, false)
		id := receipts[0].MessageID
		switch end := str(m, "end", "commit"); end {
		case "commit":
			if err := tx.Commit(); err != nil {
				failed("end_failed", err, object{"body": body, "end": end})
			} else {
				emit("committed", object{"body": body, "id": id})
			}
		case "rollback":
			if err := tx.RollBack(); err != nil {
				failed("end_failed", err, object{"body": body, "end": end})
			} else {
				emit("rolled_back", object{"body": body, "id": id})
			}
		}
	}
	deadline := time.Now().Add(seconds(num(step, "wait_for_check_s", 0)))
	for checks.Load() < int64(num(step, "checks", 0)) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(seconds(num(step, "linger_s", checkAnswerLinger(step))))
	return nil
}

func describe(view *rmq.MessageView) object {
	described := object{
		"id": view.GetMessageId(), "topic": view.GetTopic(), "body": string(view.GetBody()),
		"keys": []string{}, "properties": map[string]string{},
		"attempt": view.GetDeliveryAttempt(), "received_at": time.Now().UnixMilli(),
	}
	if keys := view.GetKeys(); len(keys) > 0 {
		described["keys"] = keys
	}
	if properties := view.GetProperties(); len(properties) > 0 {
		described["properties"] = properties
	}
	if tag := view.GetTag(); tag != nil {
		described["tag"] = *tag
	}
	if group := view.GetMessageGroup(); group != nil {
		described["group"] = *group
	}
	if at := view.GetDeliveryTimestamp(); at != nil {
		described["delivery_timestamp"] = at.UnixMilli()
	}
	if host := view.GetBornHost(); host != nil {
		described["born_host"] = *host
	}
	if born := view.GetBornTimestamp(); born != nil {
		described["born_timestamp"] = born.UnixMilli()
	}
	return described
}

func (d *driver) simple(step object) error {
	consumer, err := rmq.NewSimpleConsumer(d.config(str(step, "group", "")),
		rmq.WithSimpleAwaitDuration(seconds(num(step, "await_s", 2))),
		rmq.WithSimpleSubscriptionExpressions(subscription(step)),
	)
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return err
	}
	defer consumer.GracefulStop()
	latest := map[string]*rmq.MessageView{}
	ack := func(body string) {
		view := latest[body]
		if view == nil {
			emit("ack_failed", object{"body": body, "type": "NotReceived", "message": "never received"})
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := consumer.Ack(ctx, view); err != nil {
			failed("ack_failed", err, object{"body": body, "id": view.GetMessageId()})
		} else {
			emit("acked", object{"body": body, "id": view.GetMessageId()})
		}
	}
	for _, op := range objects(step, "ops") {
		switch str(op, "op", "") {
		case "receive":
			wanted := int(num(op, "count", 1))
			deadline := time.Now().Add(seconds(num(op, "deadline_s", 20)))
			for got := 0; got < wanted && time.Now().Before(deadline); {
				ctx, cancel := context.WithTimeout(context.Background(), seconds(num(step, "await_s", 2)+10))
				views, err := consumer.Receive(ctx, int32(num(op, "max", 16)), seconds(num(op, "invisible_s", 30)))
				cancel()
				if err != nil {
					// No message within the await duration comes back as an error too.
					if status, ok := rmq.AsErrRpcStatus(err); !ok || status.GetCode() != 40401 {
						failed("receive_failed", err, nil)
						time.Sleep(200 * time.Millisecond)
					}
					continue
				}
				for _, view := range views {
					got++
					body := string(view.GetBody())
					latest[body] = view
					emit("received", describe(view))
					if flag(op, "ack") {
						ack(body)
					}
				}
			}
		case "ack":
			for _, body := range list(op, "bodies") {
				ack(body)
			}
		case "change":
			body := str(op, "body", "")
			view := latest[body]
			if view == nil {
				emit("change_failed", object{"body": body, "type": "NotReceived", "message": "never received"})
				continue
			}
			if err := consumer.ChangeInvisibleDuration(view, seconds(num(op, "invisible_s", 30))); err != nil {
				failed("change_failed", err, object{"body": body})
			} else {
				emit("changed", object{"body": body, "id": view.GetMessageId()})
			}
		case "sleep":
			time.Sleep(seconds(num(op, "s", 0)))
		default:
			return fmt.Errorf("unknown op %v", op["op"])
		}
	}
	return nil
}

func subscription(step object) map[string]*rmq.FilterExpression {
	expression := rmq.NewFilterExpression(str(step, "expression", "*"))
	if flag(step, "sql") {
		expression = rmq.NewFilterExpressionWithType(str(step, "expression", ""), rmq.SQL92)
	}
	return map[string]*rmq.FilterExpression{str(step, "topic", ""): expression}
}

// pushed is one push consumer of a "push" step and what its listener saw.
type pushed struct {
	spec         object
	fail         map[string]bool
	expect       []string
	failAttempts int
	mu           sync.Mutex
	succeeded    map[string]bool
	failures     map[string]int
	consumer     rmq.PushConsumer
}

func (p *pushed) consume(view *rmq.MessageView) rmq.ConsumerResult {
	body := string(view.GetBody())
	failing := p.fail[body]
	event := describe(view)
	event["failed"] = failing
	event["consumer_group"] = str(p.spec, "group", "")
	emit("consumed", event)
	p.mu.Lock()
	defer p.mu.Unlock()
	if failing {
		p.failures[body]++
		return rmq.FAILURE
	}
	p.succeeded[body] = true
	return rmq.SUCCESS
}

func (p *pushed) done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, body := range p.expect {
		if !p.succeeded[body] {
			return false
		}
	}
	for body := range p.fail {
		if p.failures[body] < p.failAttempts {
			return false
		}
	}
	return true
}

func (d *driver) newPushed(spec object) (*pushed, error) {
	p := &pushed{
		spec: spec, fail: map[string]bool{}, expect: list(spec, "expect"),
		failAttempts: int(num(spec, "fail_attempts", 1)),
		succeeded:    map[string]bool{}, failures: map[string]int{},
	}
	for _, body := range list(spec, "fail") {
		p.fail[body] = true
	}
	consumer, err := rmq.NewPushConsumer(d.config(str(spec, "group", "")),
		rmq.WithPushSubscriptionExpressions(subscription(spec)),
		rmq.WithPushConsumptionThreadCount(int32(num(spec, "threads", 4))),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: p.consume}),
	)
	if err != nil {
		return nil, err
	}
	if err := consumer.Start(); err != nil {
		return nil, err
	}
	p.consumer = consumer
	return p, nil
}

// push runs push consumers, all at once: the step's own fields make one, "consumers":
// [..] several. They stop together, since a push consumer's stop waits for its receive
// long polls to end (the server's long-polling timeout; below, a client bug).
func (d *driver) push(step object) error {
	specs := objects(step, "consumers")
	if len(specs) == 0 {
		specs = []object{step}
	}
	var consumers []*pushed
	defer func() {
		var stopping sync.WaitGroup
		for _, p := range consumers {
			stopping.Add(1)
			go func(p *pushed) {
				defer stopping.Done()
				if err := p.consumer.GracefulStop(); err != nil {
					failed("close_failed", err, object{"group": str(p.spec, "group", "")})
				}
			}(p)
		}
		// 5.1.4 never counts down a receive answered "no new message" (process_queue.go
		// skips doAfter for MESSAGE_NOT_FOUND), so after any empty long poll GracefulStop
		// waits out request timeout + 30 s for a receive that ended long before. Once
		// stopping, it issues no receive: the one in flight ends within the server's long
		// poll (the tests' clusters: 5 s), so that long is waited, and a little more.
		stopped := make(chan struct{})
		go func() {
			stopping.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(seconds(num(step, "stop_wait_s", 7))):
		}
	}()
	for _, spec := range specs {
		p, err := d.newPushed(spec)
		if err != nil {
			return err
		}
		consumers = append(consumers, p)
	}
	deadline := time.Now().Add(seconds(num(step, "deadline_s", 30)))
	for time.Now().Before(deadline) {
		all := true
		for _, p := range consumers {
			all = all && p.done()
		}
		if all {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range consumers {
		emit("push_waited", object{"group": str(p.spec, "group", ""), "all_seen": p.done()})
	}
	time.Sleep(seconds(num(step, "linger_s", 0)))
	return nil
}

// monotonic is seconds on CLOCK_MONOTONIC: the clock a failover drill kills by
// (bench/official_failover.py compares these stamps with Python's time.monotonic()).
// load is a failover drill's load (drill.go) with a SimpleConsumer receiving and acking;
// it also emits ack_failed and receive_failed.
func (d *driver) load(step object) error {
	topic, group := str(step, "topic", ""), str(step, "group", "")
	producer, err := rmq.NewProducer(d.config(""), rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	consumer, err := rmq.NewSimpleConsumer(d.config(group),
		rmq.WithSimpleAwaitDuration(seconds(num(step, "await_s", 2))),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
	)
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return err
	}
	defer consumer.GracefulStop()
	run := newDrill(step)
	run.produce(func(body string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := producer.Send(ctx, &rmq.Message{Topic: topic, Body: []byte(body)})
		return err
	})
	consuming := make(chan struct{})
	go func() {
		defer close(consuming)
		invisible := seconds(num(step, "invisible_s", 5))
		for !run.drained() {
			t0 := monotonic()
			ctx, cancel := context.WithTimeout(context.Background(), seconds(num(step, "await_s", 2)+10))
			views, err := consumer.Receive(ctx, 16, invisible)
			cancel()
			if err != nil {
				if status, ok := rmq.AsErrRpcStatus(err); !ok || status.GetCode() != 40401 {
					failed("receive_failed", err, object{"t0": t0, "t1": monotonic()})
					time.Sleep(50 * time.Millisecond)
				}
				continue
			}
			for _, view := range views {
				run.receive(string(view.GetBody()), int(view.GetDeliveryAttempt()))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := consumer.Ack(ctx, view); err != nil {
					failed("ack_failed", err, object{"body": string(view.GetBody()), "t": monotonic()})
				}
				cancel()
			}
		}
	}()
	run.untilStopped()
	<-consuming
	return nil
}

func main() {
	spec, err := readSpec()
	d := &driver{endpoints: str(spec, "endpoints", "")}
	runSteps(spec, err, map[string]func(object) error{
		"produce":     d.produce,
		"transaction": d.transaction,
		"simple":      d.simple,
		"push":        d.push,
		"load":        d.load,
	})
}
