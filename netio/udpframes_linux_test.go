//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/header"
)

// fuzzEndpoints are socket-less frame endpoints for exercising the frame
// parser and synthesiser.
func fuzzEndpoints() []*UDPFrames {
	mk := func(ap netip.AddrPort) *UDPFrames {
		return udpFrames(&UDPEndpoint{is6: ap.Addr().Is6(), local: ap, wildcard: ap.Addr().IsUnspecified(), mtu: 9000})
	}
	return []*UDPFrames{
		mk(netip.MustParseAddrPort("0.0.0.0:4791")),
		mk(netip.MustParseAddrPort("192.168.122.1:4791")),
		mk(netip.MustParseAddrPort("[::]:4791")),
	}
}

// parseTx parses frame as Write does, into the datagram that WriteDatagrams
// would send, or reports that one of them drops it.
func (a *UDPFrames) parseTx(frame []byte, tx *txFrame) bool {
	var d OutDatagram
	return a.parseFrame(frame, nil, &d, nil) && a.txDatagram(&d, tx)
}

// FuzzUDPParseTx feeds arbitrary frames to the Write-side parser and checks
// that what it accepts is consistent with the frame's bytes, and that a
// frame synthesised by the Read side from the parsed fields parses back to
// the same fields.
func FuzzUDPParseTx(f *testing.F) {
	for _, c := range []string{"rxe-rc-pingpong.pcap", "rxe-rc-pingpong-ipv6.pcap"} {
		for _, fr := range captureFrames(f, c) {
			f.Add(fr)
			if len(fr) > 19 && binary.BigEndian.Uint16(fr[12:]) == etherTypeIPv4 {
				// rxe numbers its IPv4 datagrams; the same frame with ID 0.
				z := bytes.Clone(fr)
				z[18], z[19] = 0, 0
				f.Add(z)
			}
		}
	}
	f.Add(ipFrame{src: netip.MustParseAddrPort("10.0.0.1:49152"), dst: netip.MustParseAddrPort("10.0.0.2:4791"),
		ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(1, 4)}.build())
	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, e := range fuzzEndpoints() {
			var tx txFrame
			if !e.parseTx(frame, &tx) {
				continue
			}
			be := binary.BigEndian
			udp := frame[e.hdrLen-udpHeaderLen:]
			if int(be.Uint16(udp[4:])) != udpHeaderLen+len(tx.payload) || !bytes.Equal(tx.payload, udp[udpHeaderLen:udpHeaderLen+len(tx.payload)]) {
				t.Fatalf("payload %d bytes does not match the UDP header", len(tx.payload))
			}
			if tx.dst.Port() != be.Uint16(udp[2:]) || tx.srcPort != be.Uint16(udp[0:]) {
				t.Fatalf("ports %d→%v", tx.srcPort, tx.dst)
			}
			if !e.is6 && (be.Uint16(frame[18:]) != tx.ipv4ID || be.Uint16(frame[20:]) != ipv4FlagDF) {
				t.Fatalf("accepted IPv4 ID %#x (parsed %#x) flags %#x", be.Uint16(frame[18:]), tx.ipv4ID, be.Uint16(frame[20:]))
			}
			// Read side: synthesise from the parsed fields, parse again.
			rx := udpFrames(&UDPEndpoint{is6: e.is6, local: netip.AddrPortFrom(tx.dst.Addr(), tx.dst.Port()), wildcard: true,
				mtu: 65535})
			src := tx.src
			if !src.IsValid() {
				if e.is6 {
					src = netip.AddrFrom16([16]byte(frame[22:38]))
				} else {
					src = netip.AddrFrom4([4]byte(frame[26:30]))
				}
			}
			out := make([]byte, e.hdrLen+len(tx.payload))
			copy(out[e.hdrLen:], tx.payload)
			n := rx.synthesise(out, &Datagram{Payload: tx.payload, Src: netip.AddrPortFrom(src, tx.srcPort), Dst: tx.dst, TOS: tx.tos, TTL: tx.ttl})
			var again txFrame
			if n != len(out) || !rx.parseTx(out, &again) {
				t.Fatalf("synthesised frame %x does not parse", out)
			}
			if again.dst != tx.dst || again.srcPort != tx.srcPort || again.tos != tx.tos || again.ttl != tx.ttl ||
				!bytes.Equal(again.payload, tx.payload) {
				t.Fatalf("round trip: %+v\nbecame %+v", tx, again)
			}
			if !e.is6 && !header.IPv4(out[EthernetHeaderLen:EthernetHeaderLen+ipv4HeaderLen]).IsChecksumValid() {
				t.Fatalf("synthesised IPv4 header checksum wrong: %x", out[14:34])
			}
		}
	})
}
