package supervise

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var hostlists = []struct {
	list string
	want string // comma-joined; "" for an error
}{
	{"vm", "vm"},
	{"node[01-04,07]", "node01,node02,node03,node04,node07"},
	{"x[8-11]", "x8,x9,x10,x11"},
	{"x[098-102]", "x098,x099,x100,x101,x102"},
	{"n[1-010]", "n1,n2,n3,n4,n5,n6,n7,n8,n9,n10"}, // padded as the first number is
	{"a,b[1-2],c", "a,b1,b2,c"},
	{"n[0]", "n0"},
	{"n[1-3,5-6]", "n1,n2,n3,n5,n6"},
	{"a[1-2]b[3-4]", "a1b3,a1b4,a2b3,a2b4"}, // the leftmost varies slowest
	{"gpu-[1-2],cpu-[7]", "gpu-1,gpu-2,cpu-7"},
	{"", ""},
	{"n[2-1]", ""},
	{"n[1-2", ""},
	{"n1-2]", ""},
	{"n[a-b]", ""},
	{"n[1-]", ""},
	{"n[]", ""},
	{"n[[1]]", ""},
	{"a,,b", ""},
	{"n[0-99999999]", ""},
	{"n[0-999]m[0-999]", ""},
	{"n[99999999999999999999-99999999999999999999]", ""},
}

// TestExpandHostlist: Slurm's host list syntax, lists that expand and
// lists refused (a *HostlistError naming the list).
func TestExpandHostlist(t *testing.T) {
	for _, tc := range hostlists {
		got, err := ExpandHostlist(tc.list)
		if tc.want == "" {
			var he *HostlistError
			if !errors.As(err, &he) || he.List != tc.list {
				t.Errorf("%q: got %v, %v; want a HostlistError", tc.list, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("%q: got %v, %v; want %s", tc.list, got, err, tc.want)
		}
	}
}

// TestExpandHostlistAsSlurmDoes: where Slurm's scontrol is installed, it
// expands every valid list of the table as ExpandHostlist does (it reads
// a configuration first: a minimal one of the test's own).
func TestExpandHostlistAsSlurmDoes(t *testing.T) {
	scontrol, err := exec.LookPath("scontrol")
	if err != nil {
		t.Skip("no scontrol (Debian's slurm-client): the table alone checks the syntax")
	}
	conf := filepath.Join(t.TempDir(), "slurm.conf")
	if err := os.WriteFile(conf, []byte("ClusterName=hostlist\nSlurmctldHost=localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range hostlists {
		if tc.want == "" {
			continue
		}
		c := exec.Command(scontrol, "show", "hostnames", tc.list)
		c.Env = append(os.Environ(), "SLURM_CONF="+conf)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("scontrol show hostnames %q: %v", tc.list, err)
		}
		got, _ := ExpandHostlist(tc.list)
		if want := strings.Fields(string(out)); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: ExpandHostlist %v, scontrol %v", tc.list, got, want)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, tc := range hostlists {
		f.Add(tc.list)
	}
	f.Fuzz(func(t *testing.T, list string) {
		hosts, err := ExpandHostlist(list)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("%q: %d hosts", list, len(hosts))
		}
		for _, h := range hosts {
			if strings.ContainsAny(h, "[],") {
				t.Fatalf("%q: host %q", list, h)
			}
		}
	})
}
