package netio

// RecordDatagrams records datagrams received outside the wrapped endpoint's
// reads as ReadDatagrams records its own: those of a RoCE device's multicast
// member sockets (UDPEndpoint.JoinGroup), which are sockets of their own, so
// that a --pcap capture holds the multicast packets the device received too.
// It may be called beside the endpoint's reader.
func (c *Capture) RecordDatagrams(d []Datagram) { c.recordDatagrams(d) }
