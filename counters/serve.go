package counters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ListenAddr completes a --metrics address: a bare PORT or :PORT listens on
// the loopback address 127.0.0.1 (counters are not for the network unless
// asked: 0.0.0.0:PORT or [::]:PORT say so), "" is 127.0.0.1:0 (a port the
// kernel picks).
func ListenAddr(addr string) (string, error) {
	switch {
	case addr == "":
		return "127.0.0.1:0", nil
	case !strings.Contains(addr, ":"):
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metrics address %q: %v", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Server serves a Registry's counters over HTTP: /metrics in Prometheus'
// text format (WritePrometheus), /metrics.json as JSON (WriteJSON).
type Server struct {
	// Addr is the address it listens on (the port the kernel picked for
	// port 0).
	Addr net.Addr
	srv  *http.Server
	done chan error

	unannounce func() // removes the AnnounceDir file
}

// Serve listens on addr (ListenAddr's rules) and serves r until Close,
// with the process's PID and command line; it announces the address in
// AnnounceDir (softrdma stat without --from finds it there) until Close.
func Serve(addr string, r *Registry) (*Server, error) {
	a, err := ListenAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	snap := func() Snapshot {
		s := r.Snapshot()
		s.PID, s.Command = os.Getpid(), strings.Join(os.Args, " ")
		return s
	}
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		WritePrometheus(w, snap())
	})
	mux.HandleFunc("/metrics.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		WriteJSON(w, snap())
	})
	s := &Server{Addr: ln.Addr(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan error, 1)}
	// Best effort: softrdma stat --from ADDR works without it.
	s.unannounce, _ = announce(AnnounceDir(), s.Addr.String())
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// URL is the address of the Prometheus endpoint: http://ADDR/metrics.
func (s *Server) URL() string { return "http://" + s.Addr.String() + "/metrics" }

// Close stops the server.
func (s *Server) Close() error {
	if s.unannounce != nil {
		s.unannounce()
	}
	err := s.srv.Close()
	if e := <-s.done; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// Fetch reads the counters a process serves at addr (HOST:PORT, a bare PORT
// or :PORT on 127.0.0.1, or an http:// URL) from its Prometheus endpoint.
func Fetch(ctx context.Context, addr string) (Snapshot, error) {
	url := addr
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		a, err := ListenAddr(addr)
		if err != nil {
			return Snapshot{}, err
		}
		url = "http://" + a + "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Snapshot{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Snapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Snapshot{}, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	s, err := ParsePrometheus(resp.Body)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", url, err)
	}
	return s, nil
}
