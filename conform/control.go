package conform

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// The control protocol (CONTROL.md): JSON objects, one per line, over a stream
// (TCP, or net.Pipe in process). The tester sends
//
//	{"id":1,"op":"create_qp","args":{...}}
//
// and the peer answers each request, in order, with
//
//	{"id":1,"ok":true,"result":{...}}   or   {"id":1,"ok":false,"error":"..."}
//
// ControlProtocol is the version string of hello.
const ControlProtocol = "softrdma-conform/1"

// DefaultControlPort is the TCP port `softrdma conform serve` listens on.
const DefaultControlPort = 7471

// Operations of the control protocol.
const (
	OpHello     = "hello"
	OpCreateQP  = "create_qp"
	OpDestroyQP = "destroy_qp"
	OpRegMR     = "reg_mr"
	OpWriteMR   = "write_mr"
	OpReadMR    = "read_mr"
	OpPostRecv  = "post_recv"
	OpPostSend  = "post_send"
	OpPollCQ    = "poll_cq"
	OpQueryQP   = "query_qp"
	OpReset     = "reset"
)

// ControlRequest is one request line.
type ControlRequest struct {
	ID   uint64          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// ControlResponse is one answer line.
type ControlResponse struct {
	ID     uint64          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Hello is what a peer says about itself.
type Hello struct {
	// Protocol is ControlProtocol.
	Protocol string `json:"protocol"`
	// Implementation names the peer, e.g. "softrdma".
	Implementation string `json:"implementation"`
	// Transport is "roce" or "iwarp".
	Transport string `json:"transport"`
	// Addrs are the peer's RoCE addresses (its GID table, as IP addresses).
	Addrs []string `json:"addrs"`
	// PathMTU is the port's active MTU, the default MTU of new QPs.
	PathMTU int `json:"path_mtu"`
	// PKeys is the partition key table.
	PKeys []uint16 `json:"pkeys"`
	// ByteOrder is how the peer stores atomic operands in memory: "little" or "big".
	ByteOrder string `json:"byte_order"`
	// Ops lists the operations the peer serves.
	Ops []string `json:"ops"`
}

// Has reports whether the peer serves op.
func (h *Hello) Has(op string) bool {
	for _, o := range h.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Access right names of QPSpec.Access and MRSpec.Access.
const (
	AccessRemoteWrite  = "remote_write"
	AccessRemoteRead   = "remote_read"
	AccessRemoteAtomic = "remote_atomic"
)

// QPSpec is the argument of create_qp: a QP of Type, brought to RTS. An RC or UC
// QP is connected to RemoteQPN at RemoteIP, expects RQPSN first and sends from
// SQPSN; a UD QP gets QKey.
type QPSpec struct {
	Type        string   `json:"type"` // "rc", "uc" or "ud"
	RemoteIP    string   `json:"remote_ip,omitempty"`
	RemoteQPN   uint32   `json:"remote_qpn,omitempty"`
	RQPSN       uint32   `json:"rq_psn"`
	SQPSN       uint32   `json:"sq_psn"`
	Access      []string `json:"access,omitempty"`
	PathMTU     int      `json:"path_mtu,omitempty"` // 0: the port's
	MinRNRTimer uint8    `json:"min_rnr_timer"`
	Timeout     uint8    `json:"timeout"`
	RetryCnt    uint8    `json:"retry_cnt"`
	RNRRetry    uint8    `json:"rnr_retry"`
	MaxRdAtomic int      `json:"max_rd_atomic,omitempty"`
	// MaxDestRdAtomic is the responder resources (0: 1).
	MaxDestRdAtomic int    `json:"max_dest_rd_atomic,omitempty"`
	QKey            uint32 `json:"qkey,omitempty"`
	MaxSendWR       int    `json:"max_send_wr,omitempty"` // 0: 16
	MaxRecvWR       int    `json:"max_recv_wr,omitempty"` // 0: 16
	// MPACRC is an iWARP QP's MPA CRC policy: "accept" (the default: CRC if
	// the initiator asks), "request" or "require".
	MPACRC string `json:"mpa_crc,omitempty"`
}

// QPInfo is the result of create_qp.
type QPInfo struct {
	QPN     uint32 `json:"qpn"`
	State   string `json:"state"`
	PathMTU int    `json:"path_mtu"`
	PKey    uint16 `json:"pkey"`
	// ListenAddr is where an iWARP QP waits for the tester's TCP connection
	// (host:port); the first connection whose MPA Request it accepts runs the QP.
	ListenAddr string `json:"listen_addr,omitempty"`
}

// MRSpec is the argument of reg_mr: Length bytes, each Fill, with Access (local
// write is always granted).
type MRSpec struct {
	Length int      `json:"length"`
	Access []string `json:"access,omitempty"`
	Fill   uint8    `json:"fill,omitempty"`
}

// MRInfo is the result of reg_mr.
type MRInfo struct {
	MR     int    `json:"mr"`
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	LKey   uint32 `json:"lkey"`
	Length int    `json:"length"`
}

// MemArgs are the arguments of write_mr (Data) and read_mr (Length).
type MemArgs struct {
	MR     int    `json:"mr"`
	Offset int    `json:"offset"`
	Length int    `json:"length,omitempty"`
	Data   []byte `json:"data,omitempty"` // base64 in JSON (encoding/json's []byte)
}

// RecvSpec is the argument of post_recv: Count receives of Length bytes each,
// back to back from Offset in region MR, WR IDs from WRID on.
type RecvSpec struct {
	QPN    uint32 `json:"qpn"`
	MR     int    `json:"mr"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	Count  int    `json:"count,omitempty"` // 0: 1
	WRID   uint64 `json:"wr_id"`
}

// SendSpec is the argument of post_send. Opcode is "send", "send_imm", "write",
// "write_imm", "read", "cmp_swap" or "fetch_add"; the local data is Length
// bytes at Offset in region MR. UD sends name RemoteIP, RemoteQPN and RemoteQKey.
type SendSpec struct {
	QPN        uint32 `json:"qpn"`
	Opcode     string `json:"opcode"`
	MR         int    `json:"mr"`
	Offset     int    `json:"offset"`
	Length     int    `json:"length"`
	RemoteVA   uint64 `json:"remote_va,omitempty"`
	RKey       uint32 `json:"rkey,omitempty"`
	Imm        uint32 `json:"imm,omitempty"`
	CompareAdd uint64 `json:"compare_add,omitempty"`
	Swap       uint64 `json:"swap,omitempty"`
	WRID       uint64 `json:"wr_id"`
	RemoteIP   string `json:"remote_ip,omitempty"`
	RemoteQPN  uint32 `json:"remote_qpn,omitempty"`
	RemoteQKey uint32 `json:"remote_qkey,omitempty"`
}

// PollArgs are the arguments of poll_cq: the QP's receive (Recv) or send CQ.
type PollArgs struct {
	QPN  uint32 `json:"qpn"`
	Recv bool   `json:"recv"`
	Max  int    `json:"max,omitempty"` // 0: 64
}

// Completion is one work completion.
type Completion struct {
	WRID    uint64 `json:"wr_id"`
	Status  string `json:"status"` // "IBV_WC_SUCCESS", ...
	Opcode  string `json:"opcode"` // "IBV_WC_RECV", ...
	ByteLen uint32 `json:"byte_len"`
	Imm     uint32 `json:"imm,omitempty"`
	SrcQP   uint32 `json:"src_qp,omitempty"`
	Flags   string `json:"flags,omitempty"`
}

// QPStatus is the result of query_qp.
type QPStatus struct {
	QPN      uint32            `json:"qpn"`
	State    string            `json:"state"` // "RTS", "ERR", ...
	Counters map[string]uint64 `json:"counters,omitempty"`
	// ConnError is an iWARP QP's connection error, if it ended with one.
	ConnError string `json:"conn_error,omitempty"`
}

// QPArgs names a QP (destroy_qp, query_qp).
type QPArgs struct {
	QPN uint32 `json:"qpn"`
}

// Control is the tester's side channel to the peer under test.
type Control interface {
	Hello(ctx context.Context) (*Hello, error)
	CreateQP(ctx context.Context, s QPSpec) (*QPInfo, error)
	DestroyQP(ctx context.Context, qpn uint32) error
	RegMR(ctx context.Context, s MRSpec) (*MRInfo, error)
	WriteMR(ctx context.Context, mr, offset int, data []byte) error
	ReadMR(ctx context.Context, mr, offset, length int) ([]byte, error)
	PostRecv(ctx context.Context, s RecvSpec) error
	PostSend(ctx context.Context, s SendSpec) error
	PollCQ(ctx context.Context, a PollArgs) ([]Completion, error)
	QueryQP(ctx context.Context, qpn uint32) (*QPStatus, error)
	Reset(ctx context.Context) error
	Close() error
}

// RemoteError is an error the peer answered a control request with.
type RemoteError struct {
	Op  string
	Msg string
}

// Error reads "peer: create_qp: ...".
func (e *RemoteError) Error() string { return "peer: " + e.Op + ": " + e.Msg }

// ErrUnsupportedOp is matched by the RemoteError of an operation the peer does
// not serve.
var ErrUnsupportedOp = errors.New("unsupported operation")

// Is makes errors.Is(err, ErrUnsupportedOp) true for "unsupported operation".
func (e *RemoteError) Is(target error) bool {
	return target == ErrUnsupportedOp && e.Msg == ErrUnsupportedOp.Error()
}

// Client speaks the control protocol over a stream.
type Client struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	id   uint64
}

var _ Control = (*Client)(nil)

// NewClient returns a client on conn.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
}

// DialControl connects to a control server at addr (host:port).
func DialControl(ctx context.Context, addr string) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("conform: control: %w", err)
	}
	return NewClient(c), nil
}

// maxLine bounds one protocol line (a read_mr of a 1 MiB region is 1.4 MB of base64).
const maxLine = 4 << 20

// call sends one request and decodes its answer into result (if not nil).
func (c *Client) call(ctx context.Context, op string, args, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	req := ControlRequest{ID: c.id, Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return err
		}
		req.Args = b
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetDeadline(deadline)
	if _, err := c.conn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("conform: control %s: %w", op, err)
	}
	resp, err := readLine(c.r)
	if err != nil {
		return fmt.Errorf("conform: control %s: %w", op, err)
	}
	var r ControlResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Errorf("conform: control %s: bad answer: %w", op, err)
	}
	if r.ID != req.ID {
		return fmt.Errorf("conform: control %s: answer id %d, want %d", op, r.ID, req.ID)
	}
	if !r.OK {
		return &RemoteError{Op: op, Msg: r.Error}
	}
	if result != nil {
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("conform: control %s: bad result: %w", op, err)
		}
	}
	return nil
}

// readLine reads one newline-terminated line of at most maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxLine)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// Hello asks the peer what it is.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	var h Hello
	return &h, c.call(ctx, OpHello, nil, &h)
}

// CreateQP creates a QP and brings it to RTS.
func (c *Client) CreateQP(ctx context.Context, s QPSpec) (*QPInfo, error) {
	var q QPInfo
	return &q, c.call(ctx, OpCreateQP, s, &q)
}

// DestroyQP destroys a QP the session created.
func (c *Client) DestroyQP(ctx context.Context, qpn uint32) error {
	return c.call(ctx, OpDestroyQP, QPArgs{QPN: qpn}, nil)
}

// RegMR registers a region.
func (c *Client) RegMR(ctx context.Context, s MRSpec) (*MRInfo, error) {
	var m MRInfo
	return &m, c.call(ctx, OpRegMR, s, &m)
}

// WriteMR writes data into a region at offset (as the application would).
func (c *Client) WriteMR(ctx context.Context, mr, offset int, data []byte) error {
	return c.call(ctx, OpWriteMR, MemArgs{MR: mr, Offset: offset, Data: data}, nil)
}

// ReadMR reads length bytes of a region at offset.
func (c *Client) ReadMR(ctx context.Context, mr, offset, length int) ([]byte, error) {
	var m MemArgs
	if err := c.call(ctx, OpReadMR, MemArgs{MR: mr, Offset: offset, Length: length}, &m); err != nil {
		return nil, err
	}
	return m.Data, nil
}

// PostRecv posts receives.
func (c *Client) PostRecv(ctx context.Context, s RecvSpec) error {
	return c.call(ctx, OpPostRecv, s, nil)
}

// PostSend posts one send work request (signaled).
func (c *Client) PostSend(ctx context.Context, s SendSpec) error {
	return c.call(ctx, OpPostSend, s, nil)
}

// PollCQ takes the completions waiting on a QP's send or receive CQ.
func (c *Client) PollCQ(ctx context.Context, a PollArgs) ([]Completion, error) {
	var out struct {
		Completions []Completion `json:"completions"`
	}
	if err := c.call(ctx, OpPollCQ, a, &out); err != nil {
		return nil, err
	}
	return out.Completions, nil
}

// QueryQP returns a QP's state and counters.
func (c *Client) QueryQP(ctx context.Context, qpn uint32) (*QPStatus, error) {
	var s QPStatus
	return &s, c.call(ctx, OpQueryQP, QPArgs{QPN: qpn}, &s)
}

// Reset destroys everything the session created.
func (c *Client) Reset(ctx context.Context) error { return c.call(ctx, OpReset, nil, nil) }

// Close closes the connection; the peer then destroys what the session created.
func (c *Client) Close() error { return c.conn.Close() }
