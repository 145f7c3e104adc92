package test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/softrdma/softrdma/"

// forbiddenArrows are the imports the layering forbids (docs/layout.md,
// ../shared/DESIGN.md): the leaves and the IB transport never import a device or
// a tool; iWARP never imports RoCE's packages, nor RoCE iWARP's; the IB CM sits
// above roce, not below. A key's entries are package paths or path prefixes
// ending in "/".
var forbiddenArrows = map[string][]string{
	"header":      {"roce", "iwarp", "ibcm", "neigh", "rdmacm", "device", "netio", "ibtransport", "sim"},
	"netio":       {"roce", "iwarp", "ibcm", "neigh", "rdmacm", "device", "ibtransport", "sim"},
	"sim":         {"roce", "iwarp", "ibcm", "neigh", "rdmacm", "device", "ibtransport"},
	"neigh":       {"roce", "iwarp", "ibcm", "rdmacm", "device", "ibtransport"},
	"ibtransport": {"roce", "iwarp", "ibcm", "neigh", "rdmacm", "device", "netio", "sim"},
	"iwarp":       {"roce", "ibcm", "neigh", "rdmacm", "device"},
	"roce":        {"iwarp", "ibcm", "rdmacm", "device"},
	"ibcm":        {"iwarp", "rdmacm", "device"},
	"rdmacm":      {"device"},
}

// TestArrows checks the import graph of the module's non-test code: no package
// imports cmd/ or test, and no package imports what forbiddenArrows forbids it.
// A new arrow the design allows is added to docs/layout.md; one it forbids is a
// layering fault to fix, not a rule to relax.
func TestArrows(t *testing.T) {
	imports := map[string][]string{} // package (module-relative) -> our packages it imports
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here (or only ignored ones)
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(path, ".."), "/"))
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				imports[rel] = append(imports[rel], strings.TrimPrefix(imp, module))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found the imports of %d packages only: the walk went wrong", len(imports))
	}
	for pkg, deps := range imports {
		for _, dep := range deps {
			if dep == "test" || strings.HasPrefix(dep, "test/") || strings.HasPrefix(dep, "cmd/") && !strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd or test", pkg, dep)
			}
			if slices.ContainsFunc(forbiddenArrows[pkg], func(f string) bool { return dep == f || strings.HasPrefix(dep, f+"/") }) {
				t.Errorf("%s imports %s: the layering forbids it (docs/layout.md)", pkg, dep)
			}
		}
	}
	for pkg := range forbiddenArrows {
		if _, err := build.ImportDir(filepath.Join("..", pkg), 0); err != nil {
			t.Errorf("a rule for %s, which is not a package: %v", pkg, err)
		}
	}
}
