package devspec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ConfigEnvVar names a config file to read instead of the usual ones.
const ConfigEnvVar = "SOFTRDMA_CONFIG"

// SystemConfig is the system-wide config file.
const SystemConfig = "/etc/softrdma/devices"

// ConfigPaths returns the config files Resolve looks at, in order: the file
// $SOFTRDMA_CONFIG names, alone, when it is set (explicit is then true: the
// file must exist); else $XDG_CONFIG_HOME/softrdma/devices ($HOME/.config when
// XDG_CONFIG_HOME is unset or not absolute, as the XDG base directory
// specification says), then SystemConfig.
func ConfigPaths(getenv func(string) string) (paths []string, explicit bool) {
	if p := getenv(ConfigEnvVar); p != "" {
		return []string{p}, true
	}
	dir := getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) {
		dir = ""
		if home := getenv("HOME"); filepath.IsAbs(home) {
			dir = filepath.Join(home, ".config")
		}
	}
	if dir != "" {
		paths = append(paths, filepath.Join(dir, "softrdma", "devices"))
	}
	return append(paths, SystemConfig), false
}

// ParseConfig reads a config file: one SPEC per line (Parse), '#' starts a
// comment that runs to the end of the line, blank lines are skipped. It
// returns the specs named (Name) in file order. Errors begin with name:LINE
// and then say what Parse says: the spec, the field and the value at fault.
func ParseConfig(name string, r io.Reader) ([]Spec, error) {
	var specs []Spec
	var lines []int
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) > 1:
			return nil, fmt.Errorf("%s:%d: %q after the device spec %q: want one SPEC per line", name, n, f[1], f[0])
		}
		s, err := Parse(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		specs = append(specs, s)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return nameSpecs(specs, func(i int) string { return fmt.Sprintf("%s:%d", name, lines[i]) })
}

// Source says where Resolve found the device list.
type Source struct {
	// Kind is SourceEnv, SourceConfig or SourceDefaults.
	Kind string
	// Path is the config file (SourceConfig only).
	Path string
}

// The kinds of Source.
const (
	SourceEnv      = "env"
	SourceConfig   = "config"
	SourceDefaults = "defaults"
)

func (s Source) String() string {
	switch s.Kind {
	case SourceEnv:
		return EnvVar
	case SourceConfig:
		return s.Path
	}
	return "defaults (one roce and one iwarp device per interface that is up)"
}

// Resolve returns the devices a program sees, and where the list came from:
// the SPECs of $SOFTRDMA_DEVICES when it is set and not blank; else those of
// the first config file of ConfigPaths that exists and holds at least one
// SPEC (a file of comments only is a template, as if absent); else Defaults.
// An unreadable or bad file, or a missing $SOFTRDMA_CONFIG, is an error (not
// a silent fall back to other devices). getenv is os.Getenv but for tests.
func Resolve(getenv func(string) string) ([]Spec, Source, error) {
	if list := getenv(EnvVar); strings.TrimSpace(list) != "" {
		specs, err := ParseList(list)
		if err != nil {
			return nil, Source{Kind: SourceEnv}, fmt.Errorf("%s: %w", EnvVar, err)
		}
		return specs, Source{Kind: SourceEnv}, nil
	}
	paths, explicit := ConfigPaths(getenv)
	for _, p := range paths {
		specs, err := readConfig(p)
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			continue
		}
		src := Source{Kind: SourceConfig, Path: p}
		if err != nil {
			if explicit && errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("%s=%s: %w", ConfigEnvVar, p, err)
			}
			return nil, src, err
		}
		if len(specs) > 0 {
			return specs, src, nil
		}
	}
	specs, err := Name(Defaults())
	return specs, Source{Kind: SourceDefaults}, err
}

func readConfig(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseConfig(path, f)
}

// PcapEnvVar names the capture file of a program run on softrdma's verbs
// libraries (softrdma run --pcap): each device the program opens writes its
// frames there as every command's --pcap does, pcapng for a FILE.pcapng and
// classic pcap otherwise; %p in it is the program's PID, so that both ends
// of one command line write a file each.
const PcapEnvVar = "SOFTRDMA_PCAP"
