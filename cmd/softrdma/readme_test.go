package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeListsEveryCommand: the README's Commands section has a line for
// every subcommand in the table, so a new command cannot be left out of it.
func TestReadmeListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Commands\n")
	if !ok {
		t.Fatal("README.md has no ## Commands section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, c := range commands {
		if !strings.Contains(section, "\n    softrdma "+c.name+" ") {
			t.Errorf("README.md's Commands section has no line \"    softrdma %s ...\"", c.name)
		}
	}
}
