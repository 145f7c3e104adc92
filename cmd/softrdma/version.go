package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

const versionUsage = `usage: softrdma version (or softrdma --version)

One line: softrdma VERSION (COMMIT[+dirty], GOVERSION), the module version,
the VCS commit it was built from (+dirty with uncommitted changes) and Go's.

flags:
`

// buildCommit is the commit make build passes with -X main.buildCommit
// (HEAD, +dirty with uncommitted changes): the version line's commit when
// the toolchain stamped no vcs.revision (GOFLAGS=-buildvcs=false, or a
// worktree it does not stamp).
var buildCommit string

// versionCmd is "softrdma version" (and "softrdma --version"): one line,
// "softrdma VERSION (COMMIT[+dirty], GOVERSION)", from the build information
// the Go toolchain stamps into the binary (module version, vcs.revision,
// vcs.modified), so a bug report names exactly what was run.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionUsage, stderr)
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma version: takes no arguments, got %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(stdout, "softrdma (no build information)")
		return 0
	}
	fmt.Fprintln(stdout, versionLine(bi))
	return 0
}

// versionLine formats bi as "softrdma VERSION (COMMIT[+dirty], GOVERSION)".
// The version is the main module's ("(devel)" when built from a checkout);
// the commit is vcs.revision shortened to 12 hex digits, else buildCommit,
// else "unknown" (go test, go build with -buildvcs=false).
func versionLine(bi *debug.BuildInfo) string {
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	commit, dirty := "unknown", false
	if buildCommit != "" {
		commit = buildCommit
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
			if len(commit) > 12 {
				commit = commit[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		commit += "+dirty"
	}
	return fmt.Sprintf("softrdma %s (%s, %s)", version, commit, bi.GoVersion)
}
