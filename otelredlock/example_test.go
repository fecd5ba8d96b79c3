package otelredlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quorumlock/redlock/otelredlock"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// A Client whose metrics go to an SDK MeterProvider. A ManualReader
// collects them on demand here; a service would give the provider a
// periodic reader and an exporter instead (or pass nil to use the global
// provider). The example needs three Redis nodes, so it is compiled but
// not run; the package's tests run the same on real nodes.
func ExampleWithMetrics() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()

	var pools []pool.Pool
	for _, addr := range []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"} {
		p, err := pool.New(addr)
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = p.Close() }()
		pools = append(pools, p)
	}
	client, err := redlock.New(pools, otelredlock.WithMetrics(provider))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()

	ctx := context.Background()
	lock, err := client.TryLock(ctx, "orders:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				fmt.Printf("%s{%s} count=%d sum=%.3f%s\n", m.Name, dp.Attributes.Encoded(nil), dp.Count, dp.Sum, m.Unit)
			}
		}
	}
	// Prints, for example:
	// redlock.lock.acquire.duration{redlock.outcome=acquired} count=1 sum=0.001s
	// redlock.lock.held.duration{} count=1 sum=0.001s
	// redlock.node.duration{redlock.node.outcome=ok,redlock.operation=acquire,server.address=redis-1:6379} count=1 sum=0.000s
	// ...
}
