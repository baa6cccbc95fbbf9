package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNATSListenRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats-listen", "0.0.0.0:0", "--nats-token", ""}, "off loopback the NATS server needs a token or TLS"},
		{[]string{"--nats-listen", ":0", "--nats-token", "", "--workers", "external"}, "off loopback the NATS server needs a token or TLS"},
		{[]string{"--nats-listen", ":0", "--nats", "nats://127.0.0.1:4222"}, "--nats-listen: the run uses the server at --nats"},
		{[]string{"--nats-listen", ":0", "--nats-tls-cert", "c.pem", "--workers", "external"}, "TLS needs both"},
		{[]string{"--nats-listen", ":0", "--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, "TLS is for workers on other hosts"},
		{[]string{"--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, "TLS is for the embedded server's --nats-listen"},
		{[]string{"--nats-listen", "4222"}, "want ADDR:PORT"},
		{[]string{"--nats-listen", ":70000"}, "want a number from 0 (any) to 65535"},
		{[]string{"--nats-listen", ":0", "--nats-tls-cert", "/nonexistent/c.pem", "--nats-tls-key", "/nonexistent/k.pem", "--workers", "external"}, "--nats-tls-cert /nonexistent/c.pem, --nats-tls-key /nonexistent/k.pem: "},
		{[]string{"--run", "a..b"}, "none of them empty"},
		{[]string{"--run", "alice.>"}, "a run ID holds letters, digits"},
		{[]string{"--run", "a b"}, "a run ID holds letters, digits"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errs := gp(t, "", append([]string{"run", model, "--devices", "2", "--steps", "1"}, tc.args...)...)
			if code != 2 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 6 {
				t.Fatalf("exit %d %q, want 2 and %q", code, errs, tc.want)
			}
		})
	}
	if code, _, errs := gp(t, "", "worker", "--nats", "nats://127.0.0.1:1", "--run", "x.*"); code != 2 || !strings.Contains(errs, "a run ID holds") {
		t.Errorf("worker --run x.*: exit %d %q", code, errs)
	}
}

// TestNATSListenToken: run --nats-listen :0 --workers external prints the
// command a worker on another host joins with, the generated token in it;
// a worker without the token is refused by the server, and workers started
// as printed (dialling this host's address off loopback) train the run to
// the parameters of a local run of the same plan.
func TestNATSListenToken(t *testing.T) {
	listenRun(t, "listen-token")
}

// TestNATSListenTLS: the same with TLS (a self-signed certificate for this
// host's addresses): the printed command names the certificate to trust.
func TestNATSListenTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, net.ParseIP("127.0.0.1"), net.ParseIP(hostAddress()))
	env, args := listenRun(t, "listen-tls", "--nats-tls-cert", cert, "--nats-tls-key", key)
	if !strings.HasPrefix(args[3], "tls://") || !strings.Contains(strings.Join(args, " "), "--nats-ca "+cert) {
		t.Errorf("the printed command: %v %v", env, args)
	}
}

// listenRun runs a 2-worker plan with --nats-listen :0 --workers external
// and extra, starts a worker without the token and two as printed, and
// checks the outcome; it returns the printed environment and arguments.
func listenRun(t *testing.T, run string, extra ...string) ([]string, []string) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	base := []string{"run", plan, "--model", model, "--steps", "3", "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(base, "--dump", filepath.Join(dir, "local"))...); code != 0 {
		t.Fatal(errs)
	}
	self, _ := os.Executable()
	coord := exec.Command(self, append(append(base, "--nats-listen", ":0", "--workers", "external", "--run", run, "--dump", filepath.Join(dir, "listen")), extra...)...)
	stderr, _ := coord.StderrPipe()
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	defer coord.Process.Kill()
	lines := bufio.NewReader(stderr)
	var hint string
	for {
		l, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no join instructions: %v", err)
		}
		if _, h, ok := strings.Cut(l, "on each worker host, "); ok {
			hint = strings.TrimSpace(h)
			break
		}
	}
	go io.Copy(io.Discard, lines)
	var env, args []string
	for _, f := range strings.Fields(hint) {
		switch {
		case strings.HasPrefix(f, tokenEnv+"="):
			env = append(env, f)
		case len(args) == 0 && f == "graphpipe":
			args = append(args, f)
		case len(args) > 0:
			args = append(args, f)
		}
	}
	if len(env) != 1 || len(args) < 6 || args[1] != "worker" || args[2] != "--nats" || strings.Contains(args[3], "127.0.0.1") || strings.Contains(args[3], "0.0.0.0") {
		t.Fatalf("join instructions %q: want %s=TOKEN graphpipe worker --nats URL (this host's address) --run %s", hint, tokenEnv, run)
	}
	clean := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, tokenEnv+"=") {
			clean = append(clean, e)
		}
	}
	intruder := exec.Command(self, args[1:]...)
	intruder.Env = clean
	out, err := intruder.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Authorization Violation") {
		t.Fatalf("a worker without the token: %v: %s", err, out)
	}
	var workers []*exec.Cmd
	for i := 0; i < 2; i++ {
		w := exec.Command(self, args[1:]...)
		w.Env = append(clean, env...)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Process.Kill()
		workers = append(workers, w)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not finish")
	}
	for i, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	sameParams(t, readParams(t, filepath.Join(dir, "listen", "final.safetensors")), readParams(t, filepath.Join(dir, "local", "final.safetensors")), 0)
	return env, args
}

// selfSigned writes a self-signed certificate for ips and its key, PEM.
func selfSigned(t *testing.T, dir string, ips ...net.IP) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graphpipe test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
