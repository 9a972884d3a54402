// Drives the official Go remoting client (github.com/apache/rocketmq-client-go/v2) through
// the steps of a JSON spec (the first argument, else standard input) and prints what
// happened as JSON lines, the last {"event": "done"}.
//
//	{"namesrv": "host:port", "steps": [
//	  {"do": "produce", "group", "batch": bool, "messages": [{"topic", "body", "tags",
//	       "keys": [..], "properties": {..}, "mode": "sync|async|oneway", "delay_level": n,
//	       "order_key": "k" (the sharding key: a hash of it picks the queue)}]},
//	  {"do": "transaction", "group", "topic", "messages": [{"body", "tags", "keys",
//	       "local": "COMMIT|ROLLBACK|UNKNOWN"}], "check_answer": "COMMIT|ROLLBACK|UNKNOWN",
//	       "checks": n, "wait_for_check_s": s, "linger_s" (after the checks; 3 s by default)},
//	  {"do": "push", "group", "topic", "expression", "sql": bool, "orderly": bool,
//	       "broadcast": bool, "instances": n, "max_reconsume": n, "fail": [bodies],
//	       "fail_attempts": n, "expect": [bodies], "deadline_s", "linger_s"},
//	  {"do": "load", "topic", "group", "stop_file", "pause_ms", "drain_idle_s", "drain_s"}]}
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type driver struct {
	namesrv   []string
	instances int
}

func (d *driver) instance(role string) string {
	d.instances++
	return fmt.Sprintf("driver-%s-%d-%d", role, d.instances, os.Getpid())
}

func message(topic string, m object) *primitive.Message {
	msg := primitive.NewMessage(topic, []byte(str(m, "body", "")))
	if tags := str(m, "tags", ""); tags != "" {
		msg.WithTag(tags)
	}
	if keys := list(m, "keys"); len(keys) > 0 {
		msg.WithKeys(keys)
	}
	if level := int(num(m, "delay_level", 0)); level > 0 {
		msg.WithDelayTimeLevel(level)
	}
	if key := str(m, "order_key", ""); key != "" {
		msg.WithShardingKey(key)
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for k, v := range props {
			msg.WithProperty(k, fmt.Sprint(v))
		}
	}
	return msg
}

func sent(body, mode string, r *primitive.SendResult, index int) {
	ids := strings.Split(r.MsgID, ",")
	offsetIDs := strings.Split(r.OffsetMsgID, ",")
	fields := object{
		"body": body, "mode": mode, "status": int(r.Status),
		"queue_offset": r.QueueOffset + int64(index),
	}
	if index < len(ids) {
		fields["id"] = ids[index]
	}
	if index < len(offsetIDs) {
		fields["offset_id"] = offsetIDs[index]
	}
	if r.MessageQueue != nil {
		fields["queue"] = r.MessageQueue.QueueId
		fields["broker"] = r.MessageQueue.BrokerName
	}
	emit("sent", fields)
}

func (d *driver) produce(step object) error {
	p, err := rocketmq.NewProducer(
		producer.WithNameServer(d.namesrv),
		producer.WithGroupName(str(step, "group", "driver-producer")),
		producer.WithInstanceName(d.instance("producer")),
		producer.WithSendMsgTimeout(15*time.Second),
		producer.WithRetry(2),
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	messages := objects(step, "messages")
	if flag(step, "batch") {
		var batch []*primitive.Message
		for _, m := range messages {
			batch = append(batch, message(str(m, "topic", ""), m))
		}
		result, err := p.SendSync(context.Background(), batch...)
		for i, m := range messages {
			if err != nil {
				failed("send_failed", err, object{"body": str(m, "body", ""), "mode": "batch"})
			} else {
				sent(str(m, "body", ""), "batch", result, i)
			}
		}
		return nil
	}
	var pending sync.WaitGroup
	for _, m := range messages {
		body, mode := str(m, "body", ""), str(m, "mode", "sync")
		msg := message(str(m, "topic", ""), m)
		switch mode {
		case "async":
			pending.Add(1)
			err := p.SendAsync(context.Background(), func(_ context.Context, r *primitive.SendResult, err error) {
				defer pending.Done()
				if err != nil {
					failed("send_failed", err, object{"body": body, "mode": mode})
				} else {
					sent(body, mode, r, 0)
				}
			}, msg)
			if err != nil {
				pending.Done()
				failed("send_failed", err, object{"body": body, "mode": mode})
			}
		case "oneway":
			if err := p.SendOneWay(context.Background(), msg); err != nil {
				failed("send_failed", err, object{"body": body, "mode": mode})
			} else {
				emit("sent", object{"body": body, "mode": mode, "id": msg.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)})
			}
		default:
			if str(m, "order_key", "") != "" {
				mode = "orderly"
			}
			r, err := p.SendSync(context.Background(), msg)
			if err != nil {
				failed("send_failed", err, object{"body": body, "mode": mode})
			} else {
				sent(body, mode, r, 0)
			}
		}
	}
	pending.Wait()
	return nil
}

var states = map[string]primitive.LocalTransactionState{
	"COMMIT": primitive.CommitMessageState, "ROLLBACK": primitive.RollbackMessageState,
	"UNKNOWN": primitive.UnknowState,
}

type listener struct {
	answer string
	checks atomic.Int64
}

func (l *listener) ExecuteLocalTransaction(msg *primitive.Message) primitive.LocalTransactionState {
	return states[msg.GetProperty("driver_local")]
}

func (l *listener) CheckLocalTransaction(msg *primitive.MessageExt) primitive.LocalTransactionState {
	l.checks.Add(1)
	emit("checked", object{"body": string(msg.Body), "id": msg.MsgId, "transaction_id": msg.TransactionId, "answer": l.answer})
	return states[l.answer]
}

func (d *driver) transaction(step object) error {
	topic := str(step, "topic", "")
	l := &listener{answer: str(step, "check_answer", "COMMIT")}
	p, err := rocketmq.NewTransactionProducer(l,
		producer.WithNameServer(d.namesrv),
		producer.WithGroupName(str(step, "group", "driver-tx")),
		producer.WithInstanceName(d.instance("tx")),
		producer.WithSendMsgTimeout(15*time.Second),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	for _, m := range objects(step, "messages") {
		body := str(m, "body", "")
		msg := message(topic, m)
		// The listener reads the local outcome from the message (a property that is stored too).
		msg.WithProperty("driver_local", str(m, "local", "COMMIT"))
		r, err := p.SendMessageInTransaction(context.Background(), msg)
		if err != nil {
			failed("send_failed", err, object{"body": body, "mode": "transaction"})
			continue
		}
		sent(body, "transaction", r.SendResult, 0)
		emit("local_state", object{"body": body, "state": int(r.State), "transaction_id": r.TransactionID})
	}
	deadline := time.Now().Add(seconds(num(step, "wait_for_check_s", 0)))
	for l.checks.Load() < int64(num(step, "checks", 0)) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(seconds(num(step, "linger_s", checkAnswerLinger(step))))
	return nil
}

func describe(m *primitive.MessageExt, instance string) object {
	keys := []string{}
	if k := m.GetKeys(); k != "" {
		keys = strings.Split(k, primitive.PropertyKeySeparator)
	}
	queue := int32(-1)
	if m.Queue != nil {
		queue = int32(m.Queue.QueueId)
	}
	return object{
		"id": m.MsgId, "offset_id": m.OffsetMsgId, "topic": m.Topic, "body": string(m.Body),
		"tags": m.GetTags(), "keys": keys, "properties": m.GetProperties(), "queue": queue,
		"queue_offset": m.QueueOffset, "reconsume_times": m.ReconsumeTimes,
		"born_timestamp": m.BornTimestamp, "store_timestamp": m.StoreTimestamp,
		"received_at": time.Now().UnixMilli(), "instance": instance,
	}
}

func (d *driver) push(step object) error {
	fail := map[string]bool{}
	for _, b := range list(step, "fail") {
		fail[b] = true
	}
	expect := list(step, "expect")
	failAttempts := int64(num(step, "fail_attempts", 1))
	broadcast := flag(step, "broadcast")
	var mu sync.Mutex
	succeeded := map[string]map[string]bool{}
	failures := map[string]int64{}
	var consumers []rocketmq.PushConsumer
	defer func() {
		for _, c := range consumers {
			c.Shutdown()
		}
	}()
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: str(step, "expression", "*")}
	if flag(step, "sql") {
		selector.Type = consumer.SQL92
	}
	var names []string
	for i := 0; i < int(num(step, "instances", 1)); i++ {
		name := d.instance("push")
		names = append(names, name)
		succeeded[name] = map[string]bool{}
		model := consumer.Clustering
		if broadcast {
			model = consumer.BroadCasting
		}
		options := []consumer.Option{
			consumer.WithNameServer(d.namesrv),
			consumer.WithGroupName(str(step, "group", "")),
			consumer.WithInstance(name),
			consumer.WithConsumerModel(model),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
			consumer.WithConsumerOrder(flag(step, "orderly")),
		}
		if v, ok := step["max_reconsume"].(float64); ok {
			options = append(options, consumer.WithMaxReconsumeTimes(int32(v)))
		}
		if flag(step, "orderly") {
			options = append(options, consumer.WithSuspendCurrentQueueTimeMillis(300*time.Millisecond))
		}
		c, err := rocketmq.NewPushConsumer(options...)
		if err != nil {
			return err
		}
		orderly := flag(step, "orderly")
		err = c.Subscribe(str(step, "topic", ""), selector, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				body := string(m.Body)
				failing := fail[body]
				emit("consumed", func() object { o := describe(m, name); o["failed"] = failing; return o }())
				mu.Lock()
				if failing {
					failures[body]++
				} else {
					succeeded[name][body] = true
				}
				mu.Unlock()
				if failing {
					if orderly {
						return consumer.SuspendCurrentQueueAMoment, nil
					}
					return consumer.ConsumeRetryLater, nil
				}
			}
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		consumers = append(consumers, c)
	}
	deadline := time.Now().Add(seconds(num(step, "deadline_s", 30)))
	all := false
	for !all && time.Now().Before(deadline) {
		mu.Lock()
		all = true
		union := map[string]bool{}
		for _, name := range names {
			for b := range succeeded[name] {
				union[b] = true
			}
			for _, b := range expect {
				if broadcast && !succeeded[name][b] {
					all = false
				}
			}
		}
		for _, b := range expect {
			if !union[b] {
				all = false
			}
		}
		for b := range fail {
			if failures[b] < failAttempts {
				all = false
			}
		}
		mu.Unlock()
		if !all {
			time.Sleep(100 * time.Millisecond)
		}
	}
	emit("push_waited", object{"all_seen": all})
	time.Sleep(seconds(num(step, "linger_s", 0)))
	return nil
}

// load is a failover drill's load (drill.go): sync sends (the client's own retries) and a
// push consumer.
func (d *driver) load(step object) error {
	topic := str(step, "topic", "")
	p, err := rocketmq.NewProducer(
		producer.WithNameServer(d.namesrv),
		producer.WithGroupName("drill-producer"),
		producer.WithInstanceName(d.instance("producer")),
		producer.WithSendMsgTimeout(3*time.Second),
		producer.WithRetry(2),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	run := newDrill(step)
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer(d.namesrv),
		consumer.WithGroupName(str(step, "group", "")),
		consumer.WithInstance(d.instance("push")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return err
	}
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	err = c.Subscribe(topic, selector, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			run.receive(string(m.Body), int(m.ReconsumeTimes)+1)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	defer c.Shutdown()
	run.produce(func(body string) error {
		_, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
		return err
	})
	run.untilStopped()
	for !run.drained() {
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func main() {
	if home := os.Getenv("HOME"); home != "" {
		os.MkdirAll(home+"/logs", 0o755)
		rlog.SetOutputPath(home + "/logs/rocketmq_client_go_v2.log")
	}
	spec, err := readSpec()
	d := &driver{namesrv: list(spec, "namesrv")}
	runSteps(spec, err, map[string]func(object) error{
		"produce":     d.produce,
		"transaction": d.transaction,
		"push":        d.push,
		"load":        d.load,
	})
}
