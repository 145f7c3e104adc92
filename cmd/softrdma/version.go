package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

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
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			fmt.Fprint(stderr, "usage: softrdma version\n\nprints softrdma's module version, VCS commit (+dirty if the tree was modified) and Go version\n")
			return 0
		}
		fmt.Fprintf(stderr, "softrdma version: takes no arguments, got %q\n", args)
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
