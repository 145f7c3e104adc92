package test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeLayout: README.md's Layout table names every Go package of the
// module in backticks in its package column (a row may name several; the
// packages under test/ may be named in the job column instead), and every path its package
// column names is a directory of the module: a package that moves (decode
// out of cmd/softrdma) moves in the table too.
func TestReadmeLayout(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if i := strings.Index(table, "\n## "); i >= 0 {
		table = table[:i]
	}
	named, mentioned := map[string]bool{}, map[string]bool{}
	name := regexp.MustCompile("`([a-z0-9_/]+)`")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, job, _ := strings.Cut(line[1:], " | ")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			named[m[1]], mentioned[m[1]] = true, true
		}
		for _, m := range name.FindAllStringSubmatch(job, -1) {
			mentioned[m[1]] = true
		}
	}
	if len(named) < 10 {
		t.Fatalf("found %d names in the Layout table only: the parse went wrong", len(named))
	}
	for p := range named {
		if fi, err := os.Stat(filepath.Join("..", p)); err != nil || !fi.IsDir() {
			t.Errorf("README.md's Layout table names %s, which is not a directory of the module", p)
		}
	}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
			return filepath.SkipDir
		}
		if _, err := build.ImportDir(path, 0); err != nil || path == ".." {
			return nil // no Go files here
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		if !named[rel] && !(strings.HasPrefix(rel, "test/") && mentioned[rel]) {
			t.Errorf("package %s is not in README.md's Layout table", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
