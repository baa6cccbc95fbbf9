package slurmcluster

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequireEnv, set to 1, makes a missing Slurm fail the test instead of
// skipping it (.ci/run sets it).
const RequireEnv = "GRAPHPIPE_REQUIRE_SLURM"

// daemons and clients the cluster needs, looked for on the PATH, then in
// /usr/sbin and /usr/bin (Debian's places).
var (
	daemons = []string{"munged", "slurmctld", "slurmd"}
	clients = []string{"sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo"}
)

// Cluster is a running one-node Slurm cluster.
type Cluster struct {
	t    testing.TB
	Dir  string // its configuration, key, state, spool and logs
	Conf string // slurm.conf
	Node string // the node's name: localhost, which resolves wherever the tests run
	host string // the controller's: the host's short name, as slurmctld wants
	bin  map[string]string
	proc []*daemon
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Find is where each binary the cluster needs is, and the first one
// missing ("" when none is).
func Find() (map[string]string, string) {
	bin := map[string]string{}
	for _, name := range append(append([]string{}, daemons...), clients...) {
		if p, err := exec.LookPath(name); err == nil {
			bin[name] = p
			continue
		}
		found := false
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			if st, err := os.Stat(filepath.Join(dir, name)); err == nil && !st.IsDir() {
				bin[name], found = filepath.Join(dir, name), true
				break
			}
		}
		if !found {
			return nil, name
		}
	}
	return bin, ""
}

// Start starts a cluster, or skips the test where Slurm is not installed.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin, missing := Find()
	if missing != "" {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("no %s, and $%s is 1 (install Debian's slurm-wlm and munge)", missing, RequireEnv)
		}
		t.Skipf("no %s: Slurm is not installed (Debian's slurm-wlm and munge; .ci/run installs them)", missing)
	}
	dir, err := os.MkdirTemp("", "slurm")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), bin: bin}
	t.Cleanup(c.stop)
	if err := c.configure(); err != nil {
		t.Fatal(err)
	}
	c.start("munged", bin["munged"], "--foreground", "--force", "--socket="+c.path("munge.socket"), "--key-file="+c.path("munge.key"),
		"--pid-file="+c.path("munged.pid"), "--log-file="+c.path("log/munged.log"), "--seed-file="+c.path("munged.seed"))
	c.waitFor("munged's socket", func() bool { _, err := os.Stat(c.path("munge.socket")); return err == nil })
	c.start("slurmctld", bin["slurmctld"], "-D", "-i", "-f", c.Conf)
	c.start("slurmd", bin["slurmd"], "-D", "-N", c.Node, "-f", c.Conf)
	c.waitFor("the node to be idle", func() bool {
		out, err := c.Command("sinfo", "-h", "-o", "%t").Output()
		return err == nil && strings.TrimSpace(string(out)) == "idle"
	})
	return c
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// configure writes the munge key and slurm.conf, on ports free now.
func (c *Cluster) configure() error {
	for _, d := range []string{"state", "spool", "log"} {
		if err := os.Mkdir(c.path(d), 0o755); err != nil {
			return err
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(c.path("munge.key"), key, 0o600); err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	c.Node = "localhost"
	c.host, _, _ = strings.Cut(host, ".")
	u, err := user.Current()
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	srun, err := freeRange(20)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("plugstack.conf"), nil, 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf(`ClusterName=graphpipe
SlurmctldHost=%[9]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SrunPortRange=%[4]d-%[5]d
SlurmUser=%[6]s
SlurmdUser=%[6]s
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[7]s/munge.socket,cred_expire=5
StateSaveLocation=%[7]s/state
SlurmdSpoolDir=%[7]s/spool
SlurmctldPidFile=%[7]s/slurmctld.pid
SlurmdPidFile=%[7]s/slurmd.pid
SlurmctldLogFile=%[7]s/log/slurmctld.log
SlurmdLogFile=%[7]s/log/slurmd.log
PlugStackConfig=%[7]s/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=5
MinJobAge=4
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=%[1]s NodeAddr=127.0.0.1 NodeHostname=%[1]s CPUs=%[8]d State=UNKNOWN
PartitionName=test Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, c.Node, ports[0], ports[1], srun, srun+19, u.Username, c.Dir, runtime.NumCPU(), c.host)
	return os.WriteFile(c.Conf, []byte(conf), 0o644)
}

// start starts a daemon in the foreground, its output in log/NAME.out.
func (c *Cluster) start(name, path string, args ...string) {
	c.t.Helper()
	out, err := os.Create(c.path("log/" + name + ".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }()
	c.proc = append(c.proc, d)
}

// waitFor waits up to 30 s for ok, failing the test with the daemons'
// logs.
func (c *Cluster) waitFor(what string, ok func() bool) {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
		for _, d := range c.proc {
			select {
			case <-d.done:
				c.t.Fatalf("%s exited while waiting for %s:\n%s", d.name, what, c.Logs())
			default:
			}
		}
	}
	c.t.Fatalf("waited 30 s for %s:\n%s", what, c.Logs())
}

// Env binds a Slurm command to the cluster.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Command is Slurm client command name (sbatch, srun, squeue, scancel,
// scontrol, sinfo) bound to the cluster.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	path := c.bin[name]
	if path == "" {
		path = name
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	return cmd
}

// Jobs is what squeue lists: one line per job, "" for none.
func (c *Cluster) Jobs() string {
	out, err := c.Command("squeue", "-h", "-o", "%i %T %j").CombinedOutput()
	if err != nil {
		return "squeue: " + err.Error() + ": " + string(out)
	}
	return strings.TrimSpace(string(out))
}

// Logs is the daemons' logs, their tails.
func (c *Cluster) Logs() string {
	var b bytes.Buffer
	for _, name := range []string{"munged.out", "slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(c.path("log/" + name))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", name, data)
	}
	return b.String()
}

// Leftovers is every process of the cluster's jobs still running (its
// configuration in its environment: job steps, their tasks; not the
// daemons, unless they are stopped), one line each, "" for none.
func (c *Cluster) Leftovers() string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	skip := map[int]bool{os.Getpid(): true}
	for _, d := range c.proc {
		select {
		case <-d.done:
		default:
			skip[d.cmd.Process.Pid] = true
		}
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("SLURM_CONF="+c.Conf+"\x00")) {
			continue
		}
		if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie its parent has yet to reap
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.HasPrefix(cmdline, []byte("slurmctld: ")) && skip[ppid(e.Name())] {
			continue // slurmctld's own helper (slurmscriptd)
		}
		out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " ")))
	}
	return strings.Join(out, "\n")
}

// stop cancels every job, stops the daemons and removes the directory.
func (c *Cluster) stop() {
	if len(c.proc) == 3 {
		c.Command("scancel", "--full", "-u", currentUser()).Run()
		for deadline := time.Now().Add(20 * time.Second); c.Jobs() != "" && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i := len(c.proc) - 1; i >= 0; i-- {
		d := c.proc[i]
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	if left := c.Leftovers(); left != "" {
		c.t.Errorf("processes left after the cluster stopped:\n%s", left)
	}
	os.RemoveAll(c.Dir)
}

// ppid is process pid's parent.
func ppid(pid string) int {
	st, _ := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	_, after, _ := bytes.Cut(st, []byte(") "))
	f := strings.Fields(string(after))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "root"
}

// freePorts is n TCP ports free now.
func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// freeRange is the first of n consecutive ports free now, for srun.
func freeRange(n int) (int, error) {
	for try := 0; try < 50; try++ {
		var b [2]byte
		rand.Read(b[:])
		base := 30000 + int(b[0])<<8%20000 + int(b[1])
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports", n)
}
