package bench

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatch: a measurement's context lives as long as completions keep
// coming, well past one stall period (a slow machine draining its WRs), and
// ends with errStall one or two periods after they stop. The watchdog's
// ticker and the test's sleeps run on synctest's clock: on the real one a
// loaded machine (the race detector, 2 CPUs) slept 40 ms past a 10 ms sleep.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(d time.Duration) { stallTimeout = d }(stallTimeout)
		stallTimeout = 40 * time.Millisecond
		q := &qpPair{}
		ctx, cancel := q.watch(0, 0)
		defer cancel()
		for i := 0; i < 20; i++ { // 200 ms: five periods
			time.Sleep(10 * time.Millisecond)
			if i%2 == 0 {
				q.completions.Add(1)
			} else {
				q.recvDone.Add(1)
			}
			if ctx.Err() != nil {
				t.Fatalf("ended after %d progress steps: %v", i, context.Cause(ctx))
			}
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), errStall) {
				t.Fatalf("cause %v, want errStall", context.Cause(ctx))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no end after progress stopped")
		}
	})
}

// TestParsePerftest reads the result rows perftest (and softrdma perf)
// print: the BW average of a bandwidth test, t_typical of a latency test, and
// the MTU; output without a row is an error.
func TestParsePerftest(t *testing.T) {
	const bw = ` Mtu             : 1024[B]
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             0.00               671.41 		   0.010743
---------------------------------------------------------------------------------------
`
	const lat = ` Mtu             : 4096[B]
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      5000          10.12          3239.66      25.37    	       36.45       	66.23  		239.94  		1075.23 
---------------------------------------------------------------------------------------
`
	for _, tc := range []struct {
		out  string
		lat  bool
		want float64
		mtu  int
		ok   bool
	}{
		{bw, false, 671.41, 1024, true},
		{lat, true, 25.37, 4096, true},
		{"Couldn't connect to 127.0.0.1:18515\n", false, 0, 0, false},
		{" #bytes #iterations t_min\n 64 5\n", true, 0, 0, false},
	} {
		res, err := parsePerftest(tc.out, tc.lat)
		if (err == nil) != tc.ok || (tc.ok && (res.value != tc.want || res.mtu != tc.mtu)) {
			t.Errorf("%q: %+v, %v; want %v MTU %d ok %v", tc.out, res, err, tc.want, tc.mtu, tc.ok)
		}
	}
}

// TestAwaitCredit: a SEND stream's sender out of receive credits sleeps
// (durably blocked: synctest.Wait returns only then; the runtime.Gosched
// spin it replaced never blocked, which starved the receiver of CPU on iWARP)
// until the reposter credits, and a credit given before it waits is not lost;
// a measurement that ends wakes it with its cause.
func TestAwaitCredit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &qpPair{credited: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		woke := make(chan error, 1)
		go func() { woke <- q.awaitCredit(ctx) }()
		synctest.Wait()
		select {
		case err := <-woke:
			t.Fatalf("returned %v before any credit", err)
		default:
		}
		q.recvDone.Add(1)
		q.credit()
		if err := <-woke; err != nil {
			t.Fatalf("after a credit: %v", err)
		}

		q.credit() // counted before the sender looks
		q.credit() // one token holds them all
		if err := q.awaitCredit(ctx); err != nil {
			t.Fatalf("credit given before the wait: %v", err)
		}

		go func() { woke <- q.awaitCredit(ctx) }()
		synctest.Wait()
		cancel(errStall)
		if err := <-woke; !errors.Is(err, errStall) {
			t.Fatalf("after the measurement ended: %v, want errStall", err)
		}
	})
}
