// Command modcheck builds and vets each nested module of the repository
// the way a user of it would: outside the workspace (GOWORK=off), against
// the versions of the repository's own modules that its go.mod states.
//
// Those versions may not be published yet, so modcheck serves them from a
// module proxy in a temporary directory: a version that has its tag in
// the repository ("v0.1.0" for the core, "pool/goredis/v0.1.0" for a
// nested module) is made from the tagged tree, which is what the public
// proxy will hold; any other from the working tree, which is what the tag
// is about to hold. The proxy comes first in GOPROXY, then the local
// module cache's download directory and $(go env GOPROXY) for everything
// else. The repository's modules are left out of the checksum database
// (GONOSUMDB) so that their checksums are computed from the zips served,
// and the builds run with -mod=mod on copies of the modules in the
// temporary directory, with a module cache of their own: the repository
// and the module cache are never written to.
//
// A build or vet that fails, or a go.mod that the build had to change
// (a requirement missing from it), fails the check.
//
// With -test it also runs the modules' tests (go test, without -race,
// which make test adds in the workspace; with
// REDLOCK_REQUIRE_REDIS=1): at the versions the go.mod files state, the
// lowest that the modules claim to work with. With -latest it first moves
// the modules that require the given modules to those modules' newest
// versions (go get <module>@<newest>), to test them there too.
//
// Run it from the repository:
//
//	go run ./internal/modcheck [-keep] [-v] [-modules dir,...] [-test] [-latest module,...]
//
// It runs the go command named by $GO, or "go".
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

var (
	keep    = flag.Bool("keep", false, "keep the temporary directory and print its path")
	verbose = flag.Bool("v", false, "print the go commands' output even when they succeed")
	only    = flag.String("modules", "", "comma-separated directories of the nested modules to check (default: all)")
	tests   = flag.Bool("test", false, "run the modules' tests too (go test -count=1 ./...; make test runs them with -race in the workspace)")
	latest  = flag.String("latest", "", "comma-separated module paths to move to their newest versions first, in the modules that require them")
)

// goCmd is the go command modcheck runs.
var goCmd = "go"

func main() {
	if g := os.Getenv("GO"); g != "" {
		goCmd = g
	}
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "modcheck: FAIL:", err)
		os.Exit(1)
	}
}

// module is one go.mod of the repository.
type module struct {
	Path string // module path
	Dir  string // slash-separated, relative to the repository root; "." for the root
}

// goMod is what modcheck reads of a go.mod: go mod edit -json's output.
type goMod struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
}

func run() error {
	start := time.Now()
	root, err := output("", nil, "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	goproxy, err := output(root, nil, goCmd, "env", "GOPROXY")
	if err != nil {
		return err
	}
	modcache, err := output(root, nil, goCmd, "env", "GOMODCACHE")
	if err != nil {
		return err
	}
	goflags, err := output(root, nil, goCmd, "env", "GOFLAGS")
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "modcheck-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Println("modcheck: temporary directory", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	// The working tree's files, tracked or not ignored, and its modules.
	files, err := worktreeFiles(root)
	if err != nil {
		return err
	}
	var mods []module
	byPath := map[string]module{}
	for _, f := range files {
		if path.Base(f) != "go.mod" {
			continue
		}
		gm, err := readGoMod(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		m := module{Path: gm.Module.Path, Dir: path.Dir(f)}
		mods = append(mods, m)
		byPath[m.Path] = m
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })

	// The proxy: every version of a repository module that a go.mod
	// requires, and what those versions' go.mod files require in turn.
	proxy := filepath.Join(tmp, "proxy")
	type version struct{ path, version string }
	var queue []version
	for _, m := range mods {
		gm, err := readGoMod(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))
		if err != nil {
			return err
		}
		for _, r := range gm.Require {
			if _, ok := byPath[r.Path]; ok {
				queue = append(queue, version{r.Path, r.Version})
			}
		}
	}
	served := map[version]bool{}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if served[v] {
			continue
		}
		served[v] = true
		m := byPath[v.path]
		src, err := source(root, m, v.version, files)
		if err != nil {
			return err
		}
		if err := serve(proxy, m, v.version, src); err != nil {
			return err
		}
		gm, err := parseGoMod(tmp, src.files["go.mod"])
		if err != nil {
			return fmt.Errorf("%s@%s: %v", v.path, v.version, err)
		}
		if gm.Module.Path != v.path {
			return fmt.Errorf("%s@%s: its go.mod names module %s", v.path, v.version, gm.Module.Path)
		}
		for _, r := range gm.Require {
			if _, ok := byPath[r.Path]; ok {
				queue = append(queue, version{r.Path, r.Version})
			}
		}
		fmt.Printf("modcheck: serving %s@%s from %s\n", v.path, v.version, src.from)
	}
	lists := map[string][]string{}
	for v := range served {
		lists[v.path] = append(lists[v.path], v.version)
	}
	if err := writeLists(proxy, lists); err != nil {
		return err
	}

	var rootPath string
	for _, m := range mods {
		if m.Dir == "." {
			rootPath = m.Path
		}
	}
	if rootPath == "" {
		return errors.New("no go.mod at the repository's root")
	}
	env := append(os.Environ(),
		"GOWORK=off",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(strings.TrimSpace(modcache), "cache", "download"))+","+strings.TrimSpace(goproxy),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPRIVATE=", "GONOPROXY=",
		"GONOSUMDB="+rootPath,
		// -trimpath: the packages of the temporary module cache have the
		// same build cache keys as those of the usual one.
		"GOFLAGS="+strings.TrimSpace(strings.TrimSpace(goflags)+" -mod=mod -modcacherw -trimpath"),
	)

	// The newest versions, asked of the usual proxy: the module cache's
	// download directory lists only the versions it holds.
	newest := map[string]string{}
	for _, p := range split(*latest) {
		out, err := output(tmp, append(os.Environ(), "GOWORK=off"), goCmd, "list", "-m", "-f", "{{.Version}}", p+"@latest")
		if err != nil {
			return err
		}
		newest[p] = strings.TrimSpace(out)
	}
	selected := map[string]bool{}
	for _, d := range split(*only) {
		selected[path.Clean(d)] = true
	}

	var failed []string
	found := map[string]bool{}
	for _, m := range mods {
		if m.Dir == "." || len(selected) > 0 && !selected[m.Dir] {
			continue
		}
		found[m.Dir] = true
		dir := filepath.Join(tmp, "work", filepath.FromSlash(m.Dir))
		src := worktreeSource(root, m, files)
		if err := copyFiles(dir, src.files); err != nil {
			return err
		}
		var steps [][]string
		gm, err := parseGoMod(tmp, src.files["go.mod"])
		if err != nil {
			return err
		}
		var moved []string
		for _, r := range gm.Require {
			if v, ok := newest[r.Path]; ok {
				moved = append(moved, r.Path+"@"+v)
			}
		}
		if len(moved) > 0 {
			steps = append(steps, append([]string{"get"}, moved...)) // at once: they may require each other
		}
		steps = append(steps, []string{"build", "./..."}, []string{"vet", "./..."})
		if *tests {
			steps = append(steps, []string{"test", "-count=1", "-timeout=10m", "./..."})
		}
		ok := true
		for _, args := range steps {
			t0 := time.Now()
			out, err := output(dir, append(env, "REDLOCK_REQUIRE_REDIS=1"), goCmd, args...)
			if err != nil || *verbose || args[0] == "test" {
				fmt.Printf("== %s: go %s (%s)\n%s", m.Dir, strings.Join(args, " "), time.Since(t0).Round(100*time.Millisecond), out)
			}
			if err != nil {
				ok = false
				break
			}
		}
		if ok && len(moved) == 0 {
			after, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				return err
			}
			if !bytes.Equal(after, src.files["go.mod"]) {
				fmt.Printf("== %s: the build changed go.mod: a requirement is missing from it. The go.mod it needed:\n%s", m.Dir, after)
				ok = false
			}
		}
		what := "go build, go vet"
		if *tests {
			what += ", go test"
		}
		if len(moved) > 0 {
			what += "; with " + strings.Join(moved, ", ")
		}
		if ok {
			fmt.Printf("modcheck: ok   %s (%s; GOWORK=off)\n", m.Path, what)
		} else {
			fmt.Printf("modcheck: FAIL %s\n", m.Path)
			failed = append(failed, m.Path)
		}
	}
	for d := range selected {
		if !found[d] {
			failed = append(failed, d+" (no such nested module)")
		}
	}
	fmt.Printf("modcheck: %s\n", time.Since(start).Round(100*time.Millisecond))
	if len(failed) > 0 {
		return fmt.Errorf("these modules failed against the versions stated: %s", strings.Join(failed, ", "))
	}
	return nil
}

// split splits a comma-separated list, dropping empty elements.
func split(list string) []string {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// src is the content of one module at one version: its files by path
// relative to the module's directory.
type src struct {
	from  string
	time  time.Time
	files map[string][]byte
}

// worktreeFiles lists the working tree's files that git tracks or does
// not ignore, slash-separated and relative to root.
func worktreeFiles(root string) ([]string, error) {
	out, err := output(root, nil, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	seen := map[string]bool{}
	for _, f := range strings.Split(out, "\x00") {
		if f != "" && !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

// source returns module m at version: from its tag if the repository has
// one, otherwise from the working tree.
func source(root string, m module, version string, files []string) (src, error) {
	tag := version
	if m.Dir != "." {
		tag = m.Dir + "/" + version
	}
	if _, err := output(root, nil, "git", "rev-parse", "-q", "--verify", "refs/tags/"+tag+"^{commit}"); err != nil {
		return worktreeSource(root, m, files), nil
	}
	return tagSource(root, m, tag)
}

// worktreeSource reads module m's files from the working tree.
func worktreeSource(root string, m module, files []string) src {
	s := src{from: "the working tree", time: time.Now().UTC(), files: map[string][]byte{}}
	for _, f := range files {
		rel, ok := within(m.Dir, f)
		if !ok {
			continue
		}
		name := filepath.Join(root, filepath.FromSlash(f))
		if fi, err := os.Lstat(name); err != nil || !fi.Mode().IsRegular() {
			continue // deleted, or a symbolic link: not in a module zip
		}
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		s.files[rel] = b
	}
	dropNested(s.files)
	return s
}

// tagSource reads module m's files from the tree of tag, with git archive.
func tagSource(root string, m module, tag string) (src, error) {
	s := src{from: "tag " + tag, files: map[string][]byte{}}
	ts, err := output(root, nil, "git", "log", "-1", "--format=%cI", tag+"^{commit}")
	if err != nil {
		return s, err
	}
	if s.time, err = time.Parse(time.RFC3339, strings.TrimSpace(ts)); err != nil {
		return s, err
	}
	cmd := exec.Command("git", "archive", "--format=tar", tag, "--", m.Dir)
	cmd.Dir = root
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return s, fmt.Errorf("git archive %s: %v: %s", tag, err, stderr.Bytes())
	}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		rel, ok := within(m.Dir, strings.TrimPrefix(h.Name, "./"))
		if !ok {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return s, err
		}
		s.files[rel] = b
	}
	if s.files["go.mod"] == nil {
		return s, fmt.Errorf("tag %s has no %s", tag, path.Join(m.Dir, "go.mod"))
	}
	dropNested(s.files)
	return s, nil
}

// within returns f relative to dir, if f is inside dir.
func within(dir, f string) (string, bool) {
	if dir == "." {
		return f, true
	}
	rel, ok := strings.CutPrefix(f, dir+"/")
	return rel, ok
}

// dropNested removes the files of nested modules (the directories below
// the module's own that have a go.mod) and of VCS directories, which a
// module zip leaves out.
func dropNested(files map[string][]byte) {
	var nested []string
	for f := range files {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	for f := range files {
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				delete(files, f)
			}
		}
		for _, el := range strings.Split(f, "/") {
			if el == ".git" || el == ".hg" || el == ".svn" || el == ".bzr" {
				delete(files, f)
			}
		}
	}
}

// serve writes module m at version into the proxy directory: the .info,
// .mod and .zip files of <module>/@v/.
func serve(proxy string, m module, version string, s src) error {
	dir := filepath.Join(proxy, filepath.FromSlash(escape(m.Path)), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, s.time})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, version+".mod"), s.files["go.mod"], 0o644); err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(s.files))
	for f := range s.files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		w, err := zw.Create(m.Path + "@" + version + "/" + f)
		if err != nil {
			return err
		}
		if _, err := w.Write(s.files[f]); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, version+".zip"), buf.Bytes(), 0o644)
}

// writeLists writes each module's @v/list.
func writeLists(proxy string, lists map[string][]string) error {
	for p, vs := range lists {
		sort.Strings(vs)
		name := filepath.Join(proxy, filepath.FromSlash(escape(p)), "@v", "list")
		if err := os.WriteFile(name, []byte(strings.Join(vs, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// escape is the module proxy's case encoding of a path: each upper-case
// letter becomes '!' and its lower case.
func escape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// copyFiles writes files under dir.
func copyFiles(dir string, files map[string][]byte) error {
	for f, b := range files {
		name := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func readGoMod(name string) (goMod, error) {
	var gm goMod
	out, err := output("", nil, goCmd, "mod", "edit", "-json", name)
	if err != nil {
		return gm, err
	}
	return gm, json.Unmarshal([]byte(out), &gm)
}

// parseGoMod parses the text of a go.mod, through a file in tmp.
func parseGoMod(tmp string, text []byte) (goMod, error) {
	if text == nil {
		return goMod{}, errors.New("no go.mod")
	}
	f, err := os.CreateTemp(tmp, "go.mod-")
	if err != nil {
		return goMod{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(text); err != nil {
		f.Close()
		return goMod{}, err
	}
	if err := f.Close(); err != nil {
		return goMod{}, err
	}
	return readGoMod(f.Name())
}

// output runs a command in dir (the current directory if empty) with env
// (the process's if nil) and returns its combined output; a failure's
// error carries the output.
func output(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out), nil
}
