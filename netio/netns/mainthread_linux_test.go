//go:build linux

package netns

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// mainThreadEnv makes the test binary run mainThreadChild instead of its
// tests (TestMainThreadStaysHome starts it so).
const mainThreadEnv = "SOFTRDMA_NETNS_MAIN_THREAD_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(mainThreadEnv) == "1" {
		os.Exit(mainThreadChild())
	}
	os.Exit(m.Run())
}

// mainThreadChild runs on the main goroutine with one P, so that the
// goroutines of New and Do run on the main thread while it waits for them
// (the runtime parks the main thread, locked, when they end). It prints the
// main thread's namespace before and after, and whether the main thread
// ran f, and returns 0.
func mainThreadChild() int {
	runtime.GOMAXPROCS(1)
	pid := os.Getpid()
	link := fmt.Sprintf("/proc/%d/task/%d/ns/net", pid, pid)
	before, err := os.Readlink(link)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ns, err := New("softrdma-netns-test-")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer ns.Close()
	onMain := false
	if err := ns.Do(func() error { onMain = unix.Gettid() == pid; return nil }); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	after, err := os.Readlink(link)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("before %s after %s main %v\n", before, after, onMain)
	return 0
}

// TestMainThreadStaysHome: when the goroutine of New or Do runs on the main
// thread, the main thread ends up in the namespace it started in. The
// runtime never terminates the main thread: before, it stayed parked inside
// the namespace, and the process's /proc/net (the main thread's) showed
// that namespace's sockets, so tests looking there for a listening server
// in the root namespace waited in vain.
func TestMainThreadStaysHome(t *testing.T) {
	if err := Check(); err != nil {
		t.Skipf("netns: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainThreadEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var before, after string
	var onMain bool
	if _, err := fmt.Sscanf(string(out), "before %s after %s main %t", &before, &after, &onMain); err != nil {
		t.Fatalf("child's output %q: %v", out, err)
	}
	if !onMain {
		t.Logf("Do's goroutine ran on another thread (New's may have had the main thread)")
	}
	if before != after {
		t.Errorf("main thread's namespace %s, started in %s", after, before)
	}
}
