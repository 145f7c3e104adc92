// Package rpingtext is the text rdma-core's rping prints, written from
// rping.c for tests to compare a run's output against: the ping data of each
// ping, and the lines rping -v prints. It imports nothing of ours (it is not
// the rping package's own generator, which the tests check against it).
package rpingtext

import (
	"fmt"
	"strings"
)

// Data is the ping data rping.c prints for ping i of size octets: its
// "rdma-ping-%d: " and the letters from 'A'+i%58 up, 'z' wrapping to 'A',
// up to size-1 octets (the last is the NUL).
func Data(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	c := byte(65 + i%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b)
}

// Lines is what rping -v prints for count pings of size octets: prefix is
// "ping data: " (client) or "server ping data: " (server).
func Lines(prefix string, count, size int) string {
	var s strings.Builder
	for i := range count {
		fmt.Fprintf(&s, "%s%s\n", prefix, Data(i, size))
	}
	return s.String()
}
