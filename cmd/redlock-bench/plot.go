package main

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotStep is the distance between two points of a percentile curve, in
// decades of 1/(1-q): 20 points per "nine".
const plotStep = 0.05

// writePlot draws the acquire latency distribution of each run (and in
// takeover mode the takeover latency), as latency against percentile on a
// log axis (the usual HDR picture: the tail spreads out to the right),
// and saves it to path; the extension (.svg or .png) picks the format.
func writePlot(path string, rep *report, runs []*runResult) error {
	p := plot.New()
	what := "acquire latency"
	if rep.Mode == modeTakeover {
		what = "acquire and takeover latency"
	}
	p.Title.Text = fmt.Sprintf("redlock %s: %s, %s on %s, %d nodes", rep.Mode, what,
		plural(rep.Workers, "worker"), plural(rep.Clients, "client"), rep.Nodes)
	p.X.Label.Text = "percentile"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = percentileTicks{}
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// Bottom right: the curves rise to the right, so that corner is free.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(8), vg.Points(8)
	p.Add(plotter.NewGrid())

	type series struct {
		name   string
		h      *hist
		dashed bool
	}
	var all []series
	for _, r := range runs {
		if r.takeover != nil {
			all = append(all, series{r.pool + " acquire", r.acquire, false},
				series{r.pool + " takeover", r.takeover, true})
		} else {
			all = append(all, series{r.pool, r.acquire, false})
		}
		if r.fault != nil && r.injected {
			all = append(all,
				series{r.pool + " before " + r.fault.kind, r.before, true},
				series{r.pool + " after " + r.fault.kind, r.after, true})
		}
	}
	drawn := 0
	for i, s := range all {
		xys := percentileCurve(s.h)
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.name, s.h.count()), l)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("no acquire latency was measured: nothing to draw")
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// percentileCurve returns points (1/(1-q), latency in ms at quantile q)
// from q = 0 to the largest q the sample count resolves, then the max.
func percentileCurve(h *hist) plotter.XYs {
	n := h.count()
	if n == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 {
		return max(float64(d)/float64(time.Millisecond), 0.001) // > 0 for the log axis
	}
	xys := plotter.XYs{{X: 1, Y: ms(h.min())}}
	top := math.Log10(float64(n))
	for k := plotStep; k < top; k += plotStep {
		x := math.Pow(10, k)
		xys = append(xys, plotter.XY{X: x, Y: ms(h.quantile(1 - 1/x))})
	}
	return append(xys, plotter.XY{X: max(float64(n), 1.001), Y: ms(h.max())})
}

// percentileTicks labels a log axis of 1/(1-q) with percentiles: 0%, 90%,
// 99%, 99.9%...
type percentileTicks struct{}

func (percentileTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for x := 1.0; x <= hi*1.0001; x *= 10 {
		if x >= lo*0.9999 {
			ticks = append(ticks, plot.Tick{Value: x, Label: percentLabel(x)})
		}
		for i := 2; i < 10; i++ {
			if m := x * float64(i); m >= lo && m <= hi {
				ticks = append(ticks, plot.Tick{Value: m})
			}
		}
	}
	return ticks
}

// percentLabel names the percentile at x = 1/(1-q).
func percentLabel(x float64) string {
	digits := max(0, int(math.Round(math.Log10(x)))-2) // 99% needs none, 99.9% one
	return strconv.FormatFloat(100*(1-1/x), 'f', digits, 64) + "%"
}
