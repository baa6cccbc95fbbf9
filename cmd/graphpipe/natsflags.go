package main

import (
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
)

// tokenEnv carries a NATS token to workers without showing it in ps.
const tokenEnv = runtime.TokenEnv

type natsFlags struct {
	url, token, creds, ca string
}

func (f *natsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "", "NATS server or cluster URL(s), comma-separated")
	cmd.Flags().StringVar(&f.token, "nats-token", "", "NATS auth token (default: $"+tokenEnv+")")
	cmd.Flags().StringVar(&f.creds, "nats-creds", "", "NATS credentials `FILE` (JWT and NKey)")
	cmd.Flags().StringVar(&f.ca, "nats-ca", "", "trust this CA `FILE` for TLS to NATS")
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

func (f *natsFlags) options(name string) runtime.NATSOptions {
	tok := f.token
	if tok == "" {
		tok = os.Getenv(tokenEnv)
	}
	return runtime.NATSOptions{URL: f.url, Token: tok, CredsFile: f.creds, CAFile: f.ca, Name: name}
}
