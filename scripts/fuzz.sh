#!/usr/bin/env bash
# Runs every fuzz target of the module, one at a time, each for FUZZTIME (default 5s).
# make test runs it briefly; make fuzz runs it longer.
#
# go1.26's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" and no failing input (go.dev/issue/75804, fixed in
# go1.27): the deadline races a worker's last call. Such a run found nothing, so
# it is reported as that race and run once more; a failure that wrote a failing
# input, or any other failure, fails the script.
#
# Go minimizes each new interesting input before fuzzing on, trying up to
# n²/2 cuts of an n-octet input, and counts none of those runs until the
# minimization ends; by default it may take 60 s (-fuzzminimizetime), and a
# time bound, when it expires, stops the worker process mid-call (the
# coordinator's deadline races the worker's) and restarts it, losing its runs.
# A target whose inputs are a kilobyte or more then spent a short run
# minimizing: FuzzStreamDecoder (captured streams of 1500 octets) counted 41
# executions in 10 s from an empty cache, FuzzAgentMAD 221. So the
# minimization is bounded by a count, FUZZMINIMIZE runs (default 1000x: the
# tail cuts and one pass of single-octet cuts of a kilobyte), after which the
# input is kept as it stands; with it the two counted 97,951 and 28,109.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}
minimize=${FUZZMINIMIZE:-1000x}
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
    echo "fuzz: $dir $target ($fuzztime, minimizing in $minimize)"
    for attempt in 1 2; do
      if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimize" "$dir" > "$log" 2>&1; then
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
