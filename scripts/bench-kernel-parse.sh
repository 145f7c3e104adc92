# How bench-kernel's guest scripts read a run's MB/s; sourced (bash) in the
# guest as /project/parse.sh, and by test/interop's TestBenchKernelParse.
# Each prints a number, or nothing when the output holds none.

# bw_of SIZE FILE: the average MB/s of perftest's table row for SIZE
# (bytes iterations peak average rate).
bw_of() { awk -v s="$1" '$1 == s && NF >= 4 {v = $4} END {print v}' "$2"; }

# softrdma_bw_of FILE: bw_average of softrdma perf's JSON.
softrdma_bw_of() { sed -n 's/.*"bw_average": *\([0-9.eE+-]*\).*/\1/p' "$1" | head -1; }

# raw_results FILE: one line "RESULT raw-udp|raw-tcp BYTES MiB/s" per row of
# softrdma bench --json (indented, one field a line): the row's baseline, or
# "-" when the row has a note (its baseline or its softrdma run failed, and
# the baseline field holds 0 then, not a measurement), with a line "NOTE
# raw-udp|raw-tcp BYTES: NOTE". A measured 0 is 0.
raw_results() {
	awk -F': *' '
	function flush() {
		if (t != "" && b != "") {
			if (note != "") print "NOTE " t " " b ": " note
			print "RESULT " t " " b " " (note != "" ? "-" : base)
		}
		t = ""; b = ""; base = "-"; note = ""
	}
	BEGIN { base = "-" }
	/"transport":/ { flush(); gsub(/[",]/, "", $2); t = ($2 == "roce") ? "raw-udp" : "raw-tcp" }
	/"bytes":/ { gsub(/,/, "", $2); b = $2 }
	/"baseline":/ { gsub(/,/, "", $2); base = $2 }
	/"note":/ { note = $0; sub(/^ *"note": *"/, "", note); sub(/",?$/, "", note) }
	END { flush() }' "$1"
}

# wait_listen [PORT]: wait until a TCP socket listens on PORT (perftest's and
# softrdma perf's 18515), at most 120 s; status 1 if none did. A server
# started in the background is ready to be connected to only then: a 1-vCPU
# guest under TCG on a loaded host can take more than the 2 s the scripts
# slept (the link table's rxe client once got "Couldn't connect to
# 10.77.0.92:18515"). siw's and rdma_cm's listeners are TCP sockets too.
wait_listen() {
	local port=${1:-18515} i
	for i in $(seq 600); do
		[ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
		sleep 0.2
	done
	return 1
}
