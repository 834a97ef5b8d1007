// A producer written with the official RabbitMQ Go client (amqp091-go) and OpenTelemetry's
// Go SDK: it starts a producer span, sets its W3C traceparent on one job's AMQP headers,
// publishes the job (read from stdin) with a reply queue of its own, waits for the reply
// and prints one JSON line: the span it set and the traceparent the reply carries.
// The tracing tests check that the worker continued that trace.
// Build (offline, from Debian's packages): tests/integration/goproducer/build
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// headerCarrier lets the W3C propagator write into AMQP headers.
type headerCarrier amqp.Table

func (c headerCarrier) Get(key string) string {
	value, _ := c[key].(string)
	return value
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for key := range c {
		keys = append(keys, key)
	}
	return keys
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "goproducer:", err)
		os.Exit(2)
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: goproducer AMQP_URL REQUEST_QUEUE < job.json")
		os.Exit(2)
	}
	body, err := io.ReadAll(os.Stdin)
	must(err)
	conn, err := amqp.Dial(os.Args[1])
	must(err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(err)
	replies, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(err)
	deliveries, err := ch.Consume(replies.Name, "", true, true, false, false, nil)
	must(err)

	provider := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	ctx, span := provider.Tracer("goproducer").Start(
		context.Background(), "send build-prompt", trace.WithSpanKind(trace.SpanKindProducer))
	headers := amqp.Table{}
	propagation.TraceContext{}.Inject(ctx, headerCarrier(headers))
	must(ch.Publish("", os.Args[2], false, false, amqp.Publishing{
		ContentType:   "application/json",
		CorrelationId: "go-1",
		ReplyTo:       replies.Name,
		Headers:       headers,
		Body:          body,
	}))
	span.End()

	select {
	case reply := <-deliveries:
		traceparent, _ := reply.Headers["traceparent"].(string)
		var decoded map[string]interface{}
		must(json.Unmarshal(reply.Body, &decoded))
		out, err := json.Marshal(map[string]interface{}{
			"trace_id":          span.SpanContext().TraceID().String(),
			"span_id":           span.SpanContext().SpanID().String(),
			"reply_traceparent": traceparent,
			"reply_status":      decoded["status"],
		})
		must(err)
		fmt.Println(string(out))
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "goproducer: no reply within 60 s")
		os.Exit(1)
	}
}
