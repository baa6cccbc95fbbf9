package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded is a NATS server inside this process, on 127.0.0.1, a random port
// and a random auth token: one binary on one machine needs no broker.
type Embedded struct {
	srv   *server.Server
	Token string
}

// StartEmbedded starts the server; maxPayload 0 keeps NATS's default (1 MiB).
func StartEmbedded(maxPayload int32) (*Embedded, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, Authorization: hex.EncodeToString(tok),
		NoLog: true, NoSigs: true, MaxPayload: maxPayload}
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server: not ready after 10 s")
	}
	return &Embedded{srv: srv, Token: o.Authorization}, nil
}

// URL is the server's client address.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Shutdown stops the server.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// NATSOptions say how to reach a NATS server or cluster.
type NATSOptions struct {
	URL       string // one or more, comma-separated
	Token     string
	CredsFile string // a .creds file (JWT and NKey)
	CAFile    string // trust these roots for TLS
	Name      string
}

// NATS is a Transport over a NATS connection.
type NATS struct {
	nc   *nats.Conn
	mu   sync.Mutex // guards subs
	subs []*nats.Subscription
}

// DialNATS connects. The client's reconnect buffer is off: it would queue
// publishes silently while disconnected; the links resend what is not
// acknowledged instead.
func DialNATS(o NATSOptions) (*NATS, error) {
	opts := []nats.Option{nats.Name(o.Name), nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
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

func (n *NATS) Publish(subject string, data []byte) error { return n.nc.Publish(subject, data) }

func (n *NATS) Subscribe(subject string, fn func([]byte)) (func(), error) {
	sub, err := n.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Data) })
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

// MaxPayload is the server's limit, checked at start: larger messages are chunked.
func (n *NATS) MaxPayload() int { return int(n.nc.MaxPayload()) }

func (n *NATS) Close() error {
	n.nc.Close()
	return nil
}
