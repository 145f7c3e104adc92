package counters

// The environment variables of the verbs libraries (capi/libibverbs), which
// softrdma run sets from its --metrics and --dump-counters.
const (
	// MetricsEnvVar makes a program run with the libraries serve its
	// counters as Serve does, on the address it holds (ListenAddr's rules).
	MetricsEnvVar = "SOFTRDMA_METRICS"
	// DumpEnvVar names the file the counters go to when the program exits:
	// JSON if it ends in .json, WriteText's lines otherwise, "-" for
	// stderr; %p in it is the PID.
	DumpEnvVar = "SOFTRDMA_COUNTERS_DUMP"
)
