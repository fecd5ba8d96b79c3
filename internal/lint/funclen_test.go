package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLines is the longest a function may be, from its func line to its
// closing brace, in the packages named below (tests excepted).
const maxLines = 50

// The packages whose functions are kept short: the lock's engine, the
// node pool and the wire protocol.
var shortFuncDirs = []string{"../../redlock", "../../pool", "../wire"}

func TestFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range shortFuncDirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			checkFile(t, fset, name)
		}
	}
}

// checkFile reports every function of the file that is longer than
// maxLines.
func checkFile(t *testing.T, fset *token.FileSet, name string) {
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			return true
		}
		from, to := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if lines := to - from + 1; lines > maxLines {
			t.Errorf("%s:%d: %s has %d lines (at most %d)", name, from, fn.Name.Name, lines, maxLines)
		}
		return false
	})
}
