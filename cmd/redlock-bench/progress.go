package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressTick is how often the progress bar moves.
const progressTick = 200 * time.Millisecond

// progress draws a bar of the time measured so far against the time the
// run will take. A nil *progress draws nothing.
type progress struct {
	bar  *progressbar.ProgressBar
	stop chan struct{}
	done chan struct{}
}

// startProgress starts a bar on w for a run of total, when w is a
// terminal; otherwise it returns nil, which draws nothing.
func startProgress(w io.Writer, total time.Duration) *progress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return newProgress(w, total)
}

// newProgress starts a bar on w, terminal or not.
func newProgress(w io.Writer, total time.Duration) *progress {
	full := max(total.Milliseconds(), 1)
	p := &progress{
		bar: progressbar.NewOptions64(full,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("measuring"),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionClearOnFinish(),
		),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	start := time.Now()
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				// Never full before finish: the run may take a little
				// longer than planned (warm-up, the last Unlock).
				_ = p.bar.Set64(min(time.Since(start).Milliseconds(), full-1))
			}
		}
	}()
	return p
}

// finish stops the bar and clears it. It may be called more than once.
func (p *progress) finish() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	_ = p.bar.Finish()
}
