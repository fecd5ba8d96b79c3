package main

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Range and precision of the latency histograms, which count microseconds.
const (
	histLowest  = 1                      // 1µs
	histHighest = 60 * 1000 * 1000       // 60s
	histDigits  = 3                      // significant digits kept
	histUnit    = time.Microsecond       // what one count stands for
	histMax     = histHighest * histUnit // longest duration kept as is
	histRound   = histUnit / 2           // rounds to the nearest unit
)

// hist is an HDR histogram of durations. One goroutine writes it; merge
// the workers' histograms when they are done.
type hist struct{ h *hdrhistogram.Histogram }

func newHist() *hist {
	return &hist{hdrhistogram.New(histLowest, histHighest, histDigits)}
}

// record adds one duration; longer than histMax counts as histMax.
func (h *hist) record(d time.Duration) {
	d = min(max(d, 0), histMax)
	// Cannot fail: the value is within the histogram's range.
	_ = h.h.RecordValue(int64((d + histRound) / histUnit))
}

// merge adds o's counts to h.
func (h *hist) merge(o *hist) { h.h.Merge(o.h) }

// count returns how many durations were recorded.
func (h *hist) count() int64 { return h.h.TotalCount() }

// quantile returns the duration at or below which q (0 to 1) of the
// recorded durations lie, to the histogram's precision; 0 when empty.
func (h *hist) quantile(q float64) time.Duration {
	return time.Duration(h.h.ValueAtQuantile(q*100)) * histUnit
}

// min returns the shortest recorded duration, to the histogram's precision.
func (h *hist) min() time.Duration { return time.Duration(h.h.Min()) * histUnit }

// max returns the longest recorded duration, to the histogram's precision.
func (h *hist) max() time.Duration { return time.Duration(h.h.Max()) * histUnit }

// mean returns the mean of the recorded durations.
func (h *hist) mean() time.Duration { return time.Duration(h.h.Mean() * float64(histUnit)) }

// summary is a histogram's percentiles, as reported.
type summary struct {
	Count int64    `json:"count"`
	P50   duration `json:"p50_us"`
	P90   duration `json:"p90_us"`
	P99   duration `json:"p99_us"`
	P999  duration `json:"p99_9_us"`
	Max   duration `json:"max_us"`
	Mean  duration `json:"mean_us"`
}

// summarize returns h's summary; nil h gives an empty one.
func summarize(h *hist) summary {
	if h == nil || h.count() == 0 {
		return summary{}
	}
	return summary{
		Count: h.count(),
		P50:   duration(h.quantile(0.50)),
		P90:   duration(h.quantile(0.90)),
		P99:   duration(h.quantile(0.99)),
		P999:  duration(h.quantile(0.999)),
		Max:   duration(h.max()),
		Mean:  duration(h.mean()),
	}
}
