package otelredlock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// meter is an SDK MeterProvider whose measurements a test collects on
// demand.
type meter struct {
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

func newMeter(t testing.TB) *meter {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	return &meter{provider: mp, reader: r}
}

// collected is one collection: the metrics of ScopeName by name.
type collected map[string]metricdata.Metrics

func (m *meter) collect(t testing.TB) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.reader.Collect(context.Background(), &rm))
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, ScopeName, sm.Scope.Name)
		for _, md := range sm.Metrics {
			out[md.Name] = md
		}
	}
	return out
}

// attrs returns set as a map of strings.
func attrs(set attribute.Set) map[string]string {
	out := map[string]string{}
	for _, kv := range set.ToSlice() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// matches reports whether set has every attribute of want.
func matches(set attribute.Set, want map[string]string) bool {
	have := attrs(set)
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// hist returns the data points of histogram name (none when it has no
// data), checking its unit and temporality.
func (c collected) hist(t testing.TB, name string) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	md, ok := c[name]
	if !ok {
		return nil
	}
	require.Equal(t, "s", md.Unit, name)
	h, ok := md.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, want a float64 histogram", name, md.Data)
	return h.DataPoints
}

// count returns how many measurements histogram name has with attributes
// want (a subset), and their sum.
func (c collected) count(t testing.TB, name string, want map[string]string) (n uint64, sum float64) {
	t.Helper()
	for _, dp := range c.hist(t, name) {
		if matches(dp.Attributes, want) {
			n += dp.Count
			sum += dp.Sum
		}
	}
	return n, sum
}

// counter returns the value of counter name with attributes want (a
// subset), checking its unit and that it is monotonic.
func (c collected) counter(t testing.TB, name, unit string, want map[string]string) int64 {
	t.Helper()
	md, ok := c[name]
	if !ok {
		return 0
	}
	require.Equal(t, unit, md.Unit, name)
	s, ok := md.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, want an int64 sum", name, md.Data)
	require.True(t, s.IsMonotonic, name)
	var v int64
	for _, dp := range s.DataPoints {
		if matches(dp.Attributes, want) {
			v += dp.Value
		}
	}
	return v
}

// values returns the values attribute key takes in histogram name.
func (c collected) values(t testing.TB, name, key string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dp := range c.hist(t, name) {
		if v, ok := attrs(dp.Attributes)[key]; ok {
			out[v] = true
		}
	}
	return out
}
