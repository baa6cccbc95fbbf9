package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// tokenEnv carries a NATS token to workers without showing it in ps.
const tokenEnv = supervise.TokenEnv

type natsFlags struct {
	url, token, creds, ca string
	inOrder               bool
	// run's embedded server (registerListen)
	listen, tlsCert, tlsKey string
	tokenGiven              func() bool
}

func (f *natsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "", "NATS server or cluster URL(s), comma-separated")
	cmd.Flags().StringVar(&f.token, "nats-token", "", "NATS auth token (default: $"+tokenEnv+")")
	cmd.Flags().StringVar(&f.creds, "nats-creds", "", "NATS credentials `FILE` (JWT and NKey)")
	cmd.Flags().StringVar(&f.ca, "nats-ca", "", "trust this CA `FILE` for TLS to NATS")
	cmd.Flags().BoolVar(&f.inOrder, "nats-in-order", false, "connect to the --nats URLs in the order given, the first first (the node nearest this host), not to a random one; a lost node is still replaced by another")
}

// check refuses a --nats URL NATS cannot dial: a scheme other than nats,
// tls, ws or wss, or no host.
func (f *natsFlags) check() error {
	if f.url == "" {
		return nil
	}
	for _, u := range strings.Split(f.url, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u // NATS reads host:port as that
		}
		p, err := url.Parse(u)
		switch {
		case err != nil:
			return usagef("--nats %s: %v", f.url, err)
		case p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss":
			return usagef("--nats %s: scheme %q: want nats, tls, ws or wss", f.url, p.Scheme)
		case p.Hostname() == "":
			return usagef("--nats %s: no host", f.url)
		}
	}
	return nil
}

func (f *natsFlags) options(name string) wire.NATSOptions {
	tok := f.token
	if tok == "" {
		tok = os.Getenv(tokenEnv)
	}
	return wire.NATSOptions{URL: f.url, InOrder: f.inOrder, Token: tok, CredsFile: f.creds, CAFile: f.ca, Name: name}
}

// registerListen adds run's flags for its embedded NATS server: where it
// listens, and TLS. Its token is --nats-token (or $GRAPHPIPE_NATS_TOKEN),
// generated when neither is set; --nats-token "" turns it off, which only
// loopback or TLS allows.
func (f *natsFlags) registerListen(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.listen, "nats-listen", "", "let workers on other hosts join: the embedded NATS server listens on `ADDR:PORT` (:4222 for every interface; off loopback it needs a token, generated unless --nats-token gives one, or TLS)")
	cmd.Flags().StringVar(&f.tlsCert, "nats-tls-cert", "", "with --nats-listen: the embedded server speaks TLS with this certificate `FILE` (PEM)")
	cmd.Flags().StringVar(&f.tlsKey, "nats-tls-key", "", "with --nats-listen: the certificate's private key `FILE` (PEM)")
	f.tokenGiven = func() bool { return cmd.Flags().Changed("nats-token") }
}

// checkListen refuses what the embedded server cannot do: listen beside
// --nats, an address that is not ADDR:PORT, half of TLS, TLS to local
// workers, and, off loopback, neither a token nor TLS.
func (f *natsFlags) checkListen(workers workersFlag) error {
	tls := f.tlsCert != "" || f.tlsKey != ""
	switch {
	case f.listen == "" && tls:
		return usagef("--nats-tls-cert, --nats-tls-key: TLS is for the embedded server's --nats-listen")
	case f.listen == "":
		return nil
	case f.url != "":
		return usagef("--nats-listen: the run uses the server at --nats %s; listening is for the embedded one", redactURLs(f.url))
	case tls && (f.tlsCert == "" || f.tlsKey == ""):
		return usagef("--nats-tls-cert and --nats-tls-key: TLS needs both, the certificate and its key")
	case tls && workers.local():
		return usagef("--nats-tls-cert: TLS is for workers on other hosts (--workers external); local workers dial over loopback")
	}
	host, port, err := f.listenAddr()
	if err != nil {
		return err
	}
	if f.noToken() && !tls && !wire.IsLoopback(host) {
		return usagef("--nats-listen %s: off loopback the NATS server needs a token or TLS: drop --nats-token \"\" (a token is generated) or give --nats-tls-cert and --nats-tls-key", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return nil
}

// listenAddr is --nats-listen's host ("" becomes 0.0.0.0: every
// interface) and port.
func (f *natsFlags) listenAddr() (string, int, error) {
	host, p, err := net.SplitHostPort(f.listen)
	if err != nil {
		return "", 0, usagef("--nats-listen %s: want ADDR:PORT (%v)", f.listen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, usagef("--nats-listen %s: port %q: want a number from 0 (any) to 65535", f.listen, p)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// noToken says the user turned the embedded server's token off.
func (f *natsFlags) noToken() bool { return f.tokenGiven != nil && f.tokenGiven() && f.token == "" }

// runNATS is the NATS a run uses: the user's server or cluster (--nats), or
// an embedded one.
type runNATS struct {
	opts wire.NATSOptions // how the coordinator dials it
	srv  *wire.Embedded   // nil with --nats
	nf   *natsFlags
}

// startNATS starts the embedded server unless --nats names one. The
// coordinator's connection reports a lost node, the node it moved to and
// what the server refused, on log. The flags were checked (checkListen)
// before the run began.
func startNATS(nf *natsFlags, runID string, log io.Writer) (*runNATS, error) {
	r := &runNATS{opts: nf.options("graphpipe coordinator " + runID), nf: nf}
	logConnection(&r.opts, log, "graphpipe")
	if r.opts.URL != "" {
		return r, nil
	}
	eo := wire.EmbeddedOptions{Host: "127.0.0.1"}
	if nf.listen != "" {
		host, port, err := nf.listenAddr()
		if err != nil {
			return nil, err
		}
		eo = wire.EmbeddedOptions{Host: host, Port: port, Token: r.opts.Token, NoToken: nf.noToken(), TLSCert: nf.tlsCert, TLSKey: nf.tlsKey}
	}
	srv, err := wire.StartEmbeddedOn(eo)
	var ee *wire.EmbeddedError
	if errors.As(err, &ee) && ee.Field == "TLS" {
		return nil, inputf("--nats-tls-cert %s, --nats-tls-key %s: %s", nf.tlsCert, nf.tlsKey, ee.Reason)
	} else if err != nil {
		return nil, inputf("--nats-listen %s: %v", nf.listen, err)
	}
	r.srv = srv
	r.opts.URL, r.opts.Token = srv.URL(), srv.Token
	if srv.TLS {
		// the coordinator need not trust its own certificate: in
		// process, the server does not ask for TLS
		r.opts.InProcess, r.opts.URL = srv, strings.Replace(r.opts.URL, "tls://", "nats://", 1)
	}
	return r, nil
}

func (r *runNATS) close() {
	if r.srv != nil {
		r.srv.Shutdown()
	}
}

// announce tells how workers join: with --workers external, the command to
// start each of them with (the token's value when it is the embedded
// server's, which nobody else knows); with local workers, where a listening
// server can be reached.
func (r *runNATS) announce(w io.Writer, workers workersFlag, n int, runID string) {
	if !workers.external() {
		if r.nf.listen != "" {
			fmt.Fprintf(w, "graphpipe: the NATS server listens at %s%s\n", r.reachableURL(), r.tokenNote())
		}
		return
	}
	switch {
	case r.srv == nil:
		fmt.Fprintf(w, "waiting for %s: %s=<token> graphpipe worker --nats %s --run %s\n", plural(n, "worker"), tokenEnv, redactURLs(r.opts.URL), runID)
	case r.nf.listen == "":
		fmt.Fprintf(w, "waiting for %s on this host (the NATS server listens on 127.0.0.1 only; --nats-listen :4222 lets other hosts join): %sgraphpipe worker --nats %s --run %s\n",
			plural(n, "worker"), r.tokenEnv(), r.opts.URL, runID)
	default:
		ca := ""
		if r.srv.TLS {
			ca = " --nats-ca " + r.nf.tlsCert
			fmt.Fprintf(w, "graphpipe: workers trust the server's certificate with --nats-ca: the certificate itself, or the CA that signed it\n")
		}
		fmt.Fprintf(w, "waiting for %s: on each worker host, %sgraphpipe worker --nats %s --run %s%s\n", plural(n, "worker"), r.tokenEnv(), r.reachableURL(), runID, ca)
	}
}

func (r *runNATS) tokenEnv() string {
	if r.srv.Token == "" {
		return ""
	}
	return tokenEnv + "=" + r.srv.Token + " "
}

func (r *runNATS) tokenNote() string {
	if r.srv.Token == "" {
		return " (no token)"
	}
	return fmt.Sprintf(" (clients pass its token as %s=%s)", tokenEnv, r.srv.Token)
}

// reachableURL is the listening server's URL as another host dials it: an
// address of this host's in place of an address that means every interface.
func (r *runNATS) reachableURL() string {
	host, port := r.srv.Addr()
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = hostAddress()
	}
	scheme := "nats"
	if r.srv.TLS {
		scheme = "tls"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// hostAddress is this host's first IPv4 address off loopback, else its
// name.
func hostAddress() string {
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "127.0.0.1"
}

// logConnection makes a connection say on log, after prefix, when it lost
// its NATS node, which node it moved to, and what the server refused.
func logConnection(o *wire.NATSOptions, log io.Writer, prefix string) {
	log = supervise.SyncWriter(log)
	o.OnDisconnect = func(err error) { fmt.Fprintf(log, "%s: lost the NATS server (%v): reconnecting\n", prefix, err) }
	o.OnReconnect = func(url string) { fmt.Fprintf(log, "%s: reconnected to the NATS server at %s\n", prefix, url) }
	o.OnError = func(err error) { fmt.Fprintf(log, "%s: the NATS server refused: %v\n", prefix, err) }
}

// checkRunID refuses a run ID that cannot be part of a NATS subject
// (runtime.CheckRunID).
func checkRunID(id string) error {
	if err := runtime.CheckRunID(id); err != nil {
		return usagef("--run %q: %v", id, err)
	}
	return nil
}
