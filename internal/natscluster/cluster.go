package natscluster

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary is the nats-server to run: $GRAPHPIPE_NATS_SERVER, else
// nats-server on the PATH, else Debian's /usr/sbin/nats-server; "" when
// there is none.
func Binary() string {
	if b := os.Getenv("GRAPHPIPE_NATS_SERVER"); b != "" {
		return b
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// RequireEnv, set, makes a missing nats-server fail the test instead of
// skipping it (.ci/run sets it).
const RequireEnv = "GRAPHPIPE_REQUIRE_NATS_SERVER"

// Options shape a cluster.
type Options struct {
	Nodes int    // default 3
	Auth  string // configuration text added to every node (authorization, accounts)
}

// Cluster is a running set of nats-server nodes.
type Cluster struct {
	t     testing.TB
	bin   string
	dir   string
	mu    sync.Mutex // guards nodes' processes
	nodes []*node
}

type node struct {
	name                string
	client, route, http int
	conf                string
	cmd                 *exec.Cmd
	exited              chan struct{}
}

// Start starts a cluster, or skips the test when nats-server is absent.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("no nats-server binary, and $%s is set (install the Debian package nats-server)", RequireEnv)
		}
		t.Skip("no nats-server binary (Debian package nats-server; .ci/run installs it)")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	c := &Cluster{t: t, bin: bin, dir: t.TempDir()}
	ports := freePorts(t, 3*o.Nodes)
	for i := 0; i < o.Nodes; i++ {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("n%d", i+1), client: ports[3*i], route: ports[3*i+1], http: ports[3*i+2]})
	}
	for i, n := range c.nodes {
		n.conf = filepath.Join(c.dir, n.name+".conf")
		if err := os.WriteFile(n.conf, []byte(c.config(i, o.Auth)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)
	for i := range c.nodes {
		c.start(i)
	}
	for i := range c.nodes {
		c.waitRoutes(i)
	}
	return c
}

// config is node i's configuration: its three ports on loopback and a
// route to every other node.
func (c *Cluster) config(i int, auth string) string {
	n := c.nodes[i]
	var routes []string
	for j, m := range c.nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", m.route))
		}
	}
	return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
cluster {
  name: graphpipe-test
  listen: 127.0.0.1:%d
  routes: [%s]
}
%s
`, n.name, n.client, n.http, n.route, strings.Join(routes, ", "), auth)
}

func freePorts(t testing.TB, k int) []int {
	var ls []net.Listener
	var ports []int
	for i := 0; i < k; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	log, err := os.OpenFile(filepath.Join(c.dir, n.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		c.t.Fatalf("starting %s: %v", c.bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	c.mu.Lock()
	n.cmd, n.exited = cmd, exited
	c.mu.Unlock()
}

// URL is node i's client address.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].client) }

// URLs is every node's client address, comma-separated (what --nats takes).
func (c *Cluster) URLs() string {
	var us []string
	for i := range c.nodes {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

// Kill ends node i with SIGKILL and waits for it to go.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// Restart starts node i again, on its ports, and waits for its routes.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Kill(i)
	c.start(i)
	c.waitRoutes(i)
}

func (c *Cluster) stop() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// monitor decodes node i's monitoring endpoint path into v.
func (c *Cluster) monitor(i int, path string, v any) error {
	cl := http.Client{Timeout: time.Second}
	r, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/%s", c.nodes[i].http, path))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	return json.NewDecoder(r.Body).Decode(v)
}

// waitRoutes waits until node i has a route to every other live node.
func (c *Cluster) waitRoutes(i int) {
	c.t.Helper()
	want := len(c.nodes) - 1
	var got struct {
		NumRoutes int `json:"num_routes"`
	}
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = c.monitor(i, "routez", &got); err == nil && got.NumRoutes >= want {
			return
		}
	}
	log, _ := os.ReadFile(filepath.Join(c.dir, c.nodes[i].name+".log"))
	c.t.Fatalf("nats-server %s: %d of %d routes after 15 s (%v); its log:\n%s", c.nodes[i].name, got.NumRoutes, want, err, log)
}

// Clients names the clients connected to node i now.
func (c *Cluster) Clients(i int) ([]string, error) {
	var got struct {
		Conns []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if err := c.monitor(i, "connz?limit=1000", &got); err != nil {
		return nil, err
	}
	var names []string
	for _, cn := range got.Conns {
		names = append(names, cn.Name)
	}
	return names, nil
}

// Alive says whether node i runs (not killed, or restarted since).
func (c *Cluster) Alive(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].cmd != nil
}

// Nodes is how many nodes the cluster has.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Sub is a subscription of a node's client: its subject, and the client's
// connection id on that node.
type Sub struct {
	Subject string `json:"subject"`
	CID     uint64 `json:"cid"`
}

// Subs are the subscriptions under prefix that node i's own clients hold
// now (its /subsz, which leaves out the interest routes bring from other
// nodes: every live node's Subs together are the cluster's).
func (c *Cluster) Subs(i int, prefix string) ([]Sub, error) {
	var got struct {
		List []Sub `json:"subscriptions_list"`
	}
	if err := c.monitor(i, "subsz?subs=1&limit=100000", &got); err != nil {
		return nil, err
	}
	var out []Sub
	for _, s := range got.List {
		if strings.HasPrefix(s.Subject, prefix) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Client is a client connected to a node and what it subscribes to.
type Client struct {
	CID  uint64   `json:"cid"`
	Name string   `json:"name"`
	Subs []string `json:"subscriptions_list"`
}

// ClientSubs are node i's clients now, each with its subscriptions (its
// /connz?subs=1).
func (c *Cluster) ClientSubs(i int) ([]Client, error) {
	var got struct {
		Conns []Client `json:"connections"`
	}
	if err := c.monitor(i, "connz?subs=1&limit=1000", &got); err != nil {
		return nil, err
	}
	return got.Conns, nil
}

// Log is node i's output so far, for a failing test to show.
func (c *Cluster) Log(i int) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, c.nodes[i].name+".log"))
	return string(b)
}
