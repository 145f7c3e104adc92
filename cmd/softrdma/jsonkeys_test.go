package main

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/bench"
	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/demo"
	"github.com/softrdma/softrdma/pingpong"
)

// snakeKey is a JSON key in snake_case: lower-case words of letters and
// digits joined by underscores.
var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys walks t as encoding/json does and calls bad for every object key
// that is not snake_case: a field with no json tag (Go writes its name), or a
// tag name in another style. Types with a MarshalJSON of their own are
// checked by their own tests (decode.Problem's).
func jsonKeys(t reflect.Type, path string, seen map[reflect.Type]bool, bad func(path, key string)) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	if t.Implements(reflect.TypeFor[json.Marshaler]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Marshaler]()) {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			jsonKeys(f.Type, path, seen, bad) // promoted fields
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !snakeKey.MatchString(name) {
			bad(path+"."+f.Name, name)
		}
		jsonKeys(f.Type, path+"."+name, seen, bad)
	}
}

// TestJSONKeysSnakeCase: every command's --json output names its keys in
// snake_case (issue 23): pingpong, demo, bench, conform, decode and stat here;
// perf's in package perf (TestPerfJSONKeys). pingpong's, demo's and bench's
// "counters" are the one counters.Snapshot stat --json gives, walked here
// with the rest of them.
func TestJSONKeysSnakeCase(t *testing.T) {
	for name, v := range map[string]any{
		"pingpong":      pingpong.Report{},
		"demo":          demo.Result{},
		"bench":         bench.Report{},
		"conform":       conform.Report{},
		"decode packet": decode.Packet{},
		"decode flows":  decode.FlowSummary{},
		"stat":          counters.Snapshot{},
	} {
		jsonKeys(reflect.TypeOf(v), name, map[reflect.Type]bool{}, func(path, key string) {
			t.Errorf("%s: key %q is not snake_case", path, key)
		})
	}
	for name, v := range map[string]any{"pingpong": pingpong.Report{}, "demo": demo.Result{}, "bench": bench.Report{}} {
		f, ok := reflect.TypeOf(v).FieldByName("Counters")
		if !ok || f.Type != reflect.TypeFor[counters.Snapshot]() || f.Tag.Get("json") != "counters" {
			t.Errorf("%s's JSON has no \"counters\" of type counters.Snapshot", name)
		}
	}
}
