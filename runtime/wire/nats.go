package wire

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded is a NATS server inside this process: one binary on one machine,
// or a handful of hosts, needs no broker. By default it listens on 127.0.0.1,
// a random port, with a random auth token.
type Embedded struct {
	srv   *server.Server
	Token string // "" when the server takes no token
	TLS   bool   // whether clients must speak TLS
}

// EmbeddedOptions say where the embedded server listens and whom it lets in.
type EmbeddedOptions struct {
	Host string // "" means 127.0.0.1
	Port int    // 0 means a random port
	// Token: clients must present it; NoToken turns the token off (only
	// allowed on loopback, or with TLS), and otherwise an empty Token is
	// generated.
	Token   string
	NoToken bool
	// TLSCert and TLSKey, both or neither: clients must speak TLS.
	TLSCert, TLSKey string
	MaxPayload      int32 // 0 keeps NATS's default (1 MiB)
}

// EmbeddedError is an embedded server refused before it started.
type EmbeddedError struct {
	Field, Reason string
}

func (e *EmbeddedError) Error() string { return e.Field + ": " + e.Reason }

// StartEmbedded starts the server on loopback; maxPayload 0 keeps NATS's
// default (1 MiB).
func StartEmbedded(maxPayload int32) (*Embedded, error) {
	return StartEmbeddedOn(EmbeddedOptions{MaxPayload: maxPayload})
}

// IsLoopback says whether host names only this machine: a loopback address,
// or localhost. An unspecified address (0.0.0.0, ::, "") listens everywhere.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// StartEmbeddedOn starts the server as o says. Off loopback it refuses to
// start without a token or TLS: anyone who can reach the port could
// otherwise read and write every run's traffic.
func StartEmbeddedOn(o EmbeddedOptions) (*Embedded, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	tls := o.TLSCert != "" || o.TLSKey != ""
	if tls && (o.TLSCert == "" || o.TLSKey == "") {
		return nil, &EmbeddedError{"TLS", "needs both a certificate and its key"}
	}
	if o.NoToken && !tls && !IsLoopback(o.Host) {
		return nil, &EmbeddedError{"listen " + net.JoinHostPort(o.Host, fmt.Sprint(o.Port)), "off loopback the server needs a token or TLS"}
	}
	if o.Token == "" && !o.NoToken {
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return nil, err
		}
		o.Token = hex.EncodeToString(tok)
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	} else if l, err := net.Listen("tcp", net.JoinHostPort(o.Host, fmt.Sprint(port))); err != nil {
		// the server would only log it, and never become ready
		return nil, &EmbeddedError{"listen", err.Error()}
	} else {
		l.Close()
	}
	so := &server.Options{Host: o.Host, Port: port, NoLog: true, NoSigs: true, MaxPayload: o.MaxPayload}
	if !o.NoToken {
		so.Authorization = o.Token
	}
	if tls {
		cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLSCert, KeyFile: o.TLSKey})
		if err != nil {
			return nil, &EmbeddedError{"TLS", err.Error()}
		}
		so.TLSConfig, so.TLS, so.TLSTimeout = cfg, true, 2
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server: cannot listen on %s (not ready after 10 s)", net.JoinHostPort(o.Host, fmt.Sprint(o.Port)))
	}
	return &Embedded{srv: srv, Token: so.Authorization, TLS: tls}, nil
}

// URL is the server's client address, dialable from this host (an
// unspecified listen address becomes 127.0.0.1).
func (e *Embedded) URL() string {
	host, port := e.Addr()
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "nats"
	if e.TLS {
		scheme = "tls"
	}
	return scheme + "://" + net.JoinHostPort(host, fmt.Sprint(port))
}

// Addr is the address the server listens on and its port.
func (e *Embedded) Addr() (string, int) {
	a, ok := e.srv.Addr().(*net.TCPAddr)
	if !ok {
		return "", 0
	}
	return a.IP.String(), a.Port
}

// Shutdown stops the server.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// NATSOptions say how to reach a NATS server or cluster.
type NATSOptions struct {
	URL string // one or more, comma-separated: the nodes of a cluster
	// InOrder dials URL's nodes in the order given, the first first (the
	// node nearest this host), instead of a random one; reconnecting still
	// goes through all of them, and through the nodes the cluster names.
	InOrder   bool
	Token     string
	CredsFile string // a .creds file (JWT and NKey)
	CAFile    string // trust these roots for TLS
	Name      string
	// InProcess, when set, is dialled inside this process instead of over
	// URL (the coordinator of an embedded server: no TLS to itself).
	InProcess *Embedded
	// OnDisconnect and OnReconnect, when set, hear of a lost server and of
	// the node the connection moved to.
	OnDisconnect func(err error)
	OnReconnect  func(url string)
	// OnError, when set, hears of what the server refused asynchronously
	// (a permissions violation: a subject the user may not use).
	OnError func(err error)
}

// NATS is a Transport over a NATS connection.
type NATS struct {
	nc   *nats.Conn
	mu   sync.Mutex // guards subs
	subs []*nats.Subscription
}

// DialNATS connects. With several URLs, the client reconnects to another
// node when its own goes, for ever, every 100 ms: a run that loses every
// node stops on its heartbeats' silence (the runtime's heartbeat timeout), not on the
// client giving up. The client restores its subscriptions on the new node.
// Its reconnect buffer is off: it would queue publishes silently while
// disconnected; a publish then is lost (Publish says nothing) and the links
// resend what is not acknowledged instead.
func DialNATS(o NATSOptions) (*NATS, error) {
	opts := []nats.Option{nats.Name(o.Name), nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if o.InOrder {
		opts = append(opts, nats.DontRandomize())
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.InProcess != nil {
		opts = append(opts, nats.InProcessServer(o.InProcess.srv))
	}
	if o.OnDisconnect != nil {
		opts = append(opts, nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				o.OnDisconnect(err)
			}
		}))
	}
	if o.OnReconnect != nil {
		opts = append(opts, nats.ReconnectHandler(func(nc *nats.Conn) { o.OnReconnect(nc.ConnectedUrlRedacted()) }))
	}
	if o.OnError != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { o.OnError(err) }))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("NATS %s: %w", o.URL, err)
	}
	return &NATS{nc: nc}, nil
}

// DialNATSWaiting is DialNATS retried, while no server answers, for up to
// wait: a worker may start before the server it joins. waiting is told once,
// when the first try finds no server.
func DialNATSWaiting(ctx context.Context, o NATSOptions, wait time.Duration, waiting func(error)) (*NATS, error) {
	deadline := time.Now().Add(wait)
	for try := 0; ; try++ {
		n, err := DialNATS(o)
		if err == nil || !errors.Is(err, nats.ErrNoServers) {
			return n, err
		}
		if !time.Now().Before(deadline) {
			if try > 0 {
				err = fmt.Errorf("%w (after waiting %v)", err, wait)
			}
			return nil, err
		}
		if try == 0 && waiting != nil {
			waiting(err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("NATS %s: %w", o.URL, context.Cause(ctx))
		case <-time.After(min(250*time.Millisecond, time.Until(deadline))):
		}
	}
}

// Publish sends data on subject. While the client reconnects, the message
// is lost as if on the wire, not an error: the links resend it.
func (n *NATS) Publish(subject string, data []byte) error {
	err := n.nc.Publish(subject, data)
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		return nil
	}
	return err
}

// ConnectedURL is the node the client is connected to now ("" while it
// reconnects), its user information redacted.
func (n *NATS) ConnectedURL() string { return n.nc.ConnectedUrlRedacted() }

func (n *NATS) Subscribe(subject string, fn func([]byte)) (func(), error) {
	return n.subscribe(subject, func(m *nats.Msg) { fn(m.Data) })
}

func (n *NATS) subscribe(subject string, fn func(*nats.Msg)) (func(), error) {
	sub, err := n.nc.Subscribe(subject, fn)
	if err != nil {
		return nil, err
	}
	// the window bounds what is in flight; let the client hold all of it
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.subs = append(n.subs, sub)
	n.mu.Unlock()
	return func() { sub.Unsubscribe() }, nil
}

// splitHeader is the NATS header that carries a split message's head.
const splitHeader = "Gp-Frame"

// Splits says whether the server takes headers, which carry a split
// message's head.
func (n *NATS) Splits() bool { return n.nc.HeadersSupported() }

// PublishSplit publishes body with head in a header: the client copies
// body into its buffer, and nothing else does.
func (n *NATS) PublishSplit(subject string, head, body []byte) error {
	m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{splitHeader: []string{base64.RawStdEncoding.EncodeToString(head)}}}
	err := n.nc.PublishMsg(m)
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		return nil
	}
	return err
}

// SubscribeSplit is Subscribe for messages published whole (head nil) or
// split.
func (n *NATS) SubscribeSplit(subject string, fn func(head, body []byte)) (func(), error) {
	return n.subscribe(subject, func(m *nats.Msg) {
		if m.Header == nil {
			fn(nil, m.Data)
			return
		}
		head, err := base64.RawStdEncoding.DecodeString(m.Header.Get(splitHeader))
		if err != nil || len(head) == 0 {
			return // not ours: a split message always has its head
		}
		fn(head, m.Data)
	})
}

// MaxPayload is the server's limit, checked at start: larger messages are chunked.
func (n *NATS) MaxPayload() int { return int(n.nc.MaxPayload()) }

func (n *NATS) Close() error {
	n.nc.Close()
	return nil
}
