package otelredlock_test

import (
	"context"
	"log"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quorumlock/redlock/otelredlock"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func ExampleWithMetrics() {
	// In a service: the MeterProvider its exporter (Prometheus, OTLP)
	// reads from. Here a reader that is collected by hand.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	var pools []pool.Pool // one per Redis node, as in redlock's example
	client, err := redlock.New(pools, otelredlock.WithMetrics(provider))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// ... locks are taken and released ...

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			log.Println(m.Name) // redlock.lock.acquire.duration, redlock.node.duration, ...
		}
	}
}
