package interop_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// mckeyGroup is the IPv4 group of TestLibsRXEMckey, and mckeyCount the
// messages of each run (the guest runs under TCG).
const (
	mckeyGroup = "239.77.7.7"
	mckeyCount = "5"
)

// TestLibsRXEMckey runs rdma-core's mckey between softrdma's libraries on the
// host and the kernel's rxe in a guest, both ways: a receiver joins group
// 239.77.7.7 as a full member (rdma_join_multicast_ex), and once it is a
// member of the IP group on its interface (ip maddr: the kernel's
// cma_igmp_send, the libraries' member socket) the other side joins and
// sends 5 SEND_WITH_IMMs to QPN 0xFFFFFF. Both exit 0, the receiver only
// after all 5 completions ("data transfers complete"). The capture on the
// guest's tap decodes with no error (the ICRCs of both stacks' multicast
// packets verify) and shows the UD SENDs.
func TestLibsRXEMckey(t *testing.T) {
	h := interop.Require(t)
	interop.Libs(t)
	requireRdmacm(t)
	g := h.Boot(t, "mcast87", interop.BootOptions{IP: "10.77.0.87", NoIPv6: true, Links: "rxe"})
	if r := g.Exec(t, time.Minute, "which", "mckey"); !r.OK() {
		t.Skip("the guest has no mckey (rdmacm-utils)")
	}
	// member waits until maddr lists the group.
	member := func(t *testing.T, what string, maddr func() string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(maddr(), mckeyGroup) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never joined %s:\n%s", what, mckeyGroup, maddr())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	hostMaddr := func() string {
		out, _ := exec.Command("ip", "netns", "exec", interop.Netns, "ip", "maddr", "show", "dev", interop.Bridge).CombinedOutput()
		return string(out)
	}
	guestMaddr := func() string { return g.Exec(t, time.Minute, "ip", "maddr", "show", "dev", "eth0").Stdout }
	check := func(t *testing.T, who string, r interop.Result) {
		t.Helper()
		if !r.OK() || !strings.Contains(r.Stdout, "data transfers complete") || !strings.Contains(r.Stdout, "return status 0") {
			t.Errorf("%s: mckey did not complete:\n%s", who, r)
		}
	}

	t.Run("rxe-receives", func(t *testing.T) {
		pcap := filepath.Join(t.TempDir(), "tap.pcap")
		stop := g.PcapAll(t, pcap, "udp port 4791")
		job := g.ExecBackground(t, "mckey", "-m", mckeyGroup, "-b", g.IP, "-C", mckeyCount)
		member(t, "rxe's receiver", guestMaddr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		lib := h.LibRun(ctx, t, libDevice, "mckey", "-m", mckeyGroup, "-b", interop.HostIPv4, "-s", "-C", mckeyCount)
		wait := 2 * time.Minute
		if !lib.OK() {
			job.Kill("TERM")
			wait = 10 * time.Second
		}
		kern := job.Wait(t, wait)
		stop()
		check(t, "softrdma's libraries (sender)", lib)
		check(t, "rxe (receiver)", kern)
		checkLibCapture(t, pcap, "UD SEND")
	})

	t.Run("lib-receives", func(t *testing.T) {
		pcap := filepath.Join(t.TempDir(), "tap.pcap")
		stop := g.PcapAll(t, pcap, "udp port 4791")
		p := h.LibStart(t, libDevice, "mckey", "-m", mckeyGroup, "-b", interop.HostIPv4, "-C", mckeyCount)
		member(t, "the libraries' receiver", hostMaddr)
		kern := g.Exec(t, 2*time.Minute, "mckey", "-m", mckeyGroup, "-b", g.IP, "-s", "-C", mckeyCount)
		wait := 2 * time.Minute
		if !kern.OK() {
			wait = 10 * time.Second
		}
		lib := p.Wait(wait)
		stop()
		check(t, "rxe (sender)", kern)
		check(t, "softrdma's libraries (receiver)", lib)
		checkLibCapture(t, pcap, "UD SEND")
	})
}
