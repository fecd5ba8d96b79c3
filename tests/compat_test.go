package tests

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
)

// compatBase is the commit whose code runs beside this one's in
// TestCompat_thePreviousVersionLocksBesideThisOne: the last commit before
// the latest change to what the library writes on the nodes. A change to
// such a format moves it to the commit before that change.
// REDLOCK_COMPAT_BASE overrides it (make compat COMPAT_BASE=<commit>).
const compatBase = "cea3a4c9fbb8b46ad284daca164a11ad6ef7dac2"

// compatReport is internal/compatdriver's output.
type compatReport struct {
	PerSecond []int          `json:"per_second"`
	Overlaps  []string       `json:"overlaps"`
	Errors    map[string]int `json:"errors"`
}

// A rolling upgrade: processes of the previous version (compatBase) and of
// this one lock the same few keys on the same five nodes at once, while
// two nodes restart, one with its data (append-only, fsync always) and one
// without it. The maximum TTL is the default, a minute: a node that a
// version wrongly takes for restarted stays out for the whole run. Each version reads the other's markers: both
// keep locking through the whole run (every two seconds each takes the
// keys again), and a referee that is not a lock node never sees two
// holders at once. REDLOCK_COMPAT_TIME sets the run's length (default
// 10s; make compat runs 60s).
func TestCompat_thePreviousVersionLocksBesideThisOne(t *testing.T) {
	run := 10 * time.Second
	if v := os.Getenv("REDLOCK_COMPAT_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "REDLOCK_COMPAT_TIME")
		run = d
	}
	base := compatBase
	if v := os.Getenv("REDLOCK_COMPAT_BASE"); v != "" {
		base = v
	}
	nodes := redistest.StartT(t, 6, redistest.Options{Durable: true})
	if nodes == nil {
		return
	}
	dir := t.TempDir()
	oldBin, newBin := buildDrivers(t, base, dir)
	lock, referee := nodes.Nodes()[:5], nodes.Node(5)
	const maxTTL = time.Minute // the default: an exclusion outlasts the run
	args := func(name string) []string {
		return []string{"-addrs", strings.Join(nodes.Addrs()[:5], ","), "-referee", referee.Addr(),
			"-time", run.String(), "-max-ttl", maxTTL.String(), "-ttl", "1s", "-workers", "3", "-name", name}
	}
	reports := make([]compatReport, 2)
	var wg sync.WaitGroup
	for k, bin := range []string{oldBin, newBin} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[k] = runDriver(t, bin, args(filepath.Base(bin)))
		}()
	}
	// Restarts, a third of the run apart: each restarted node is out for
	// the rest of the run, and the other three make a quorum.
	for k := range 2 {
		time.Sleep(run / 3)
		s := lock[k]
		require.NoError(t, s.Kill())
		if k%2 == 0 {
			require.NoError(t, s.Restart(), "node %d, with its data", k)
		} else {
			require.NoError(t, s.RestartEmpty(), "node %d, empty", k)
		}
	}
	wg.Wait()
	for k, r := range reports {
		who := []string{"previous version (" + base[:min(len(base), 12)] + ")", "this version"}[k]
		total := 0
		for _, n := range r.PerSecond {
			total += n
		}
		t.Logf("%s: %d acquisitions, per second %v, errors %v", who, total, r.PerSecond, r.Errors)
		require.Empty(t, r.Overlaps, "%s: two holders at once", who)
		for s := 0; s+2 <= int(run.Seconds()); s += 2 {
			require.Positive(t, r.PerSecond[s]+r.PerSecond[s+1], "%s took no lock in seconds %d-%d of the run", who, s, s+2)
		}
	}
}

// buildDrivers builds internal/compatdriver twice, into dir: from the
// tree of commit base (the same file, copied in) and from this tree.
func buildDrivers(t *testing.T, base, dir string) (oldBin, newBin string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the previous version cannot be read")
	}
	root := strings.TrimSpace(string(must(t, exec.Command("git", "rev-parse", "--show-toplevel"))))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", base+"^{commit}").Run(); err != nil && os.Getenv("REDLOCK_REQUIRE_COMPAT") != "1" {
		// A shallow clone: make compat (REDLOCK_REQUIRE_COMPAT=1) fails here instead.
		t.Skipf("commit %s is not in this clone's history (a shallow clone?): the previous version cannot be built", base)
	}
	tree := filepath.Join(dir, "previous")
	out, err := exec.Command("git", "-C", root, "archive", "--format=tar", base).Output()
	require.NoError(t, err, "git archive %s: the previous version must be in the clone's history (a shallow clone lacks it): %s", base, stderrOf(err))
	untar(t, out, tree)
	driver := filepath.Join("internal", "compatdriver", "main.go")
	src, err := os.ReadFile(filepath.Join(root, driver))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(tree, filepath.Dir(driver)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, driver), src, 0o644))
	oldBin, newBin = filepath.Join(dir, "previous-driver"), filepath.Join(dir, "this-driver")
	for _, b := range []struct{ tree, bin string }{{tree, oldBin}, {root, newBin}} {
		cmd := exec.Command("go", "build", "-o", b.bin, "./internal/compatdriver")
		cmd.Dir, cmd.Env = b.tree, append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the driver in %s: %v\n%s", b.tree, err, out)
		}
	}
	return oldBin, newBin
}

// runDriver runs a driver to its end and reads its report.
func runDriver(t *testing.T, bin string, args []string) compatReport {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("%s: %s", filepath.Base(bin), strings.TrimSpace(stderr.String()))
	var r compatReport
	if err != nil {
		t.Errorf("%s: %v", bin, err)
		return r
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Errorf("%s: its report: %v: %q", bin, err, stdout.String())
	}
	return r
}

// untar writes the files of a tar archive under dir.
func untar(t *testing.T, archive []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(name, 0o755))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(name, b, os.FileMode(h.Mode)&0o777))
		}
	}
}

// must runs cmd and returns its output, failing the test if it fails.
func must(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", strings.Join(cmd.Args, " "), stderrOf(err))
	return out
}

// stderrOf is what a failed command wrote on its standard error.
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strconv.Quote(string(ee.Stderr))
	}
	return ""
}
