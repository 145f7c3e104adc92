//go:build cgo

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/softrdma/softrdma/capi/verbsdev"
)

// libVersion is the build's name make lib gives (-X main.libVersion: git
// describe of the tree, "-dirty" with uncommitted changes).
var libVersion string

// version names the library's build: libVersion, else the module version or
// Go's VCS stamp (the commit, "+dirty" with uncommitted changes), then the Go
// release.
func version() string {
	if libVersion != "" {
		return libVersion + " " + runtime.Version()
	}
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		if rev != "" && v == "(devel)" {
			v = rev[:min(12, len(rev))] + dirty
		}
	}
	return v + " " + runtime.Version()
}

// banner is the line SOFTRDMA_DEBUG prints when the library loads its
// devices: which build it is and what devices a program will see, each with
// its SOFTRDMA_DEVICES spec, so that a debug log says what ran on what.
func banner(l []*verbsdev.Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "libibverbs.so.1 (softrdma %s, pid %d): %d device(s)", version(), os.Getpid(), len(l))
	for i, d := range l {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		spec := d.Spec
		spec.Name = ""
		fmt.Fprintf(&b, "%s (%s)", d.Spec.Name, spec)
	}
	return b.String()
}
