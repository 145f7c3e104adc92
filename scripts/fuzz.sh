#!/usr/bin/env bash
# Runs every fuzz target of the module, one at a time, each for FUZZTIME (default 5s).
# make test runs it briefly; make fuzz runs it longer.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}
status=0
for file in $(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go'); do
  dir=./$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    echo "fuzz: $dir $target ($fuzztime)"
    if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$dir" > /tmp/softrdma-fuzz.log 2>&1; then
      cat /tmp/softrdma-fuzz.log
      status=1
    fi
  done
done
exit $status
