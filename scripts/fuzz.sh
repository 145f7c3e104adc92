#!/usr/bin/env bash
# Runs every fuzz target of the module, one at a time, each for FUZZTIME (default 5s).
# make test runs it briefly; make fuzz runs it longer.
#
# go1.26's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" and no failing input (go.dev/issue/75804, fixed in
# go1.27): the deadline races a worker's last call. Such a run found nothing, so
# it is reported as that race and run once more; a failure that wrote a failing
# input, or any other failure, fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}
log=$(mktemp /tmp/softrdma-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT
status=0

# deadline_race says whether the log in $log is go.dev/issue/75804 and nothing else.
deadline_race() {
  grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"
}

for file in $(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go'); do
  dir=./$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    echo "fuzz: $dir $target ($fuzztime)"
    for attempt in 1 2; do
      if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$dir" > "$log" 2>&1; then
        break
      fi
      if deadline_race; then
        echo "fuzz: $target: coordinator deadline race (go.dev/issue/75804), no failing input; attempt $attempt"
        continue
      fi
      cat "$log"
      status=1
      break
    done
  done
done
exit $status
