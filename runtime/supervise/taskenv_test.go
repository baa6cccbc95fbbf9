package supervise

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// env is a getenv over "K=V" pairs.
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// slurmTask is a srun task's environment: task procid of 3 on one node.
func slurmTask(procid string, more ...string) func(string) string {
	return env(append([]string{"SLURM_JOB_ID=41", "SLURM_STEP_ID=0", "SLURM_PROCID=" + procid, "SLURM_NTASKS=3",
		"SLURM_NODEID=0", "SLURM_LOCALID=" + procid, "SLURM_JOB_NODELIST=vm", "SLURM_STEP_NODELIST=vm", "SLURM_STEP_TASKS_PER_NODE=3"}, more...)...)
}

// TestDetectEnv: what each environment's variables say of a task.
func TestDetectEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(string) string
		want *TaskEnv // nil: no environment
	}{
		{"nothing", env(), nil},
		{"a batch script (no step)", env("SLURM_JOB_ID=41", "SLURM_PROCID=0", "SLURM_NTASKS=3"), nil},
		{"srun task 2 of 3", slurmTask("2"), &TaskEnv{Source: "slurm", RankVar: "SLURM_PROCID", TasksVar: "SLURM_NTASKS", PerNodeVar: "SLURM_STEP_TASKS_PER_NODE", Rank: 2, Tasks: 3, Node: 0, Local: 2, Nodes: 1, PerNode: 3,
			Hosts: []string{"vm"}, Addr: "vm", AddrVar: "SLURM_STEP_NODELIST", GPU: -1, Key: "slurm-41-0-0", JobID: "41"}},
		{"srun on two nodes, requeued", env("SLURM_JOB_ID=7", "SLURM_STEP_ID=3", "SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_NODEID=1", "SLURM_LOCALID=1",
			"SLURM_JOB_NODELIST=gpu[01-03]", "SLURM_STEP_NODELIST=gpu[02-03]", "SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_RESTART_COUNT=2", "CUDA_VISIBLE_DEVICES=5"),
			&TaskEnv{Source: "slurm", RankVar: "SLURM_PROCID", TasksVar: "SLURM_NTASKS", PerNodeVar: "SLURM_STEP_TASKS_PER_NODE", Rank: 3, Tasks: 4, Node: 1, Local: 1, Nodes: 2, PerNode: 2,
				Hosts: []string{"gpu02", "gpu03"}, Addr: "gpu02", AddrVar: "SLURM_STEP_NODELIST", GPU: 0, Visible: "5", Key: "slurm-7-3-2", Restart: 2, JobID: "7"}},
		{"srun, the node's GPUs", slurmTask("1", "CUDA_VISIBLE_DEVICES=0,1,2"), &TaskEnv{Source: "slurm", RankVar: "SLURM_PROCID", TasksVar: "SLURM_NTASKS", PerNodeVar: "SLURM_STEP_TASKS_PER_NODE", Rank: 1, Tasks: 3, Local: 1, Nodes: 1, PerNode: 3,
			Hosts: []string{"vm"}, Addr: "vm", AddrVar: "SLURM_STEP_NODELIST", GPU: 1, Visible: "0,1,2", Key: "slurm-41-0-0", JobID: "41"}},
		{"srun, the step's GPUs", slurmTask("2", "SLURM_STEP_GPUS=4,5,7"), &TaskEnv{Source: "slurm", RankVar: "SLURM_PROCID", TasksVar: "SLURM_NTASKS", PerNodeVar: "SLURM_STEP_TASKS_PER_NODE", Rank: 2, Tasks: 3, Local: 2, Nodes: 1, PerNode: 3,
			Hosts: []string{"vm"}, Addr: "vm", AddrVar: "SLURM_STEP_NODELIST", GPU: 7, Key: "slurm-41-0-0", JobID: "41"}},
		{"torchrun on one host", env("RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"),
			&TaskEnv{Source: "torchrun", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE", Rank: 1, Tasks: 3, Local: 1, Nodes: 1, PerNode: 3, Addr: "127.0.0.1", AddrVar: "MASTER_ADDR", Port: 29500, GPU: 1, Key: "torchrun-127-0-0-1-29500-0"}},
		{"torchrun on nodes, its agent's store", env("RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=29500",
			"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=1"),
			&TaskEnv{Source: "torchrun", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE", Rank: 5, Tasks: 8, Node: 1, Local: 1, Nodes: 2, PerNode: 4, Addr: "n0", AddrVar: "MASTER_ADDR", Port: 29501, GPU: 1, Key: "torchrun-n0-29501-1", Restart: 1}},
		{"torchrun inside srun", slurmTask("0", "RANK=4", "WORLD_SIZE=6", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=3", "GROUP_RANK=1", "MASTER_ADDR=vm", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=j41"),
			&TaskEnv{Source: "torchrun", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE", Rank: 4, Tasks: 6, Node: 1, Local: 1, Nodes: 2, PerNode: 3, Addr: "vm", AddrVar: "MASTER_ADDR", Port: 29500, GPU: 1, Key: "torchrun-vm-29500-0",
				Outer: "Slurm's (SLURM_PROCID 0 of SLURM_NTASKS 3)"}},
		{"a Kubernetes Indexed Job's pod", env("JOB_COMPLETION_INDEX=2", "WORLD_SIZE=3", "MASTER_ADDR=train-0.train", "MASTER_PORT=4222"),
			&TaskEnv{Source: "kubernetes", RankVar: "JOB_COMPLETION_INDEX", TasksVar: "WORLD_SIZE", PerNodeVar: "WORLD_SIZE", Rank: 2, Tasks: 3, Node: 2, Nodes: 3, PerNode: 1, Addr: "train-0.train", AddrVar: "MASTER_ADDR", Port: 4222, GPU: -1, Key: "k8s-train-0-train-4222"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectEnv(tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDetectEnvRefuses: a wrong or partial environment is an *EnvError
// naming the variable at fault.
func TestDetectEnvRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     func(string) string
		varName string
		msg     string
	}{
		{"SLURM_PROCID beyond SLURM_NTASKS", slurmTask("3"), "SLURM_PROCID", "3 is beyond SLURM_NTASKS 3 (ranks 0 to 2)"},
		{"SLURM_PROCID not a number", slurmTask("x"), "SLURM_PROCID", `"x" is not a whole number`},
		{"no SLURM_NTASKS", env("SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0"), "SLURM_NTASKS", "not set"},
		{"a bad node list", slurmTask("0", "SLURM_STEP_NODELIST=vm[1-"), "SLURM_STEP_NODELIST", "never closes"},
		{"SLURM_NODEID beyond the nodes", slurmTask("0", "SLURM_NODEID=1"), "SLURM_NODEID", "1 is beyond the 1 nodes"},
		{"SLURM_LOCALID beyond its node", slurmTask("0", "SLURM_LOCALID=3"), "SLURM_LOCALID", "3 is beyond the 3 tasks of its node"},
		{"uneven nodes", slurmTask("0", "SLURM_STEP_NODELIST=a,b", "SLURM_STEP_TASKS_PER_NODE=2,1"), "SLURM_STEP_TASKS_PER_NODE", "different numbers of tasks"},
		{"counts that do not add up", slurmTask("0", "SLURM_STEP_TASKS_PER_NODE=2"), "SLURM_STEP_TASKS_PER_NODE", "counts 2 tasks, but SLURM_NTASKS is 3"},
		{"too few GPUs", slurmTask("2", "CUDA_VISIBLE_DEVICES=0,1"), "CUDA_VISIBLE_DEVICES", "too few for local rank 2"},
		{"no MASTER_ADDR", env("RANK=0", "WORLD_SIZE=3", "MASTER_PORT=29500"), "MASTER_ADDR", "not set"},
		{"no MASTER_PORT", env("RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=h"), "MASTER_PORT", "not set"},
		{"MASTER_PORT too large", env("RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=h", "MASTER_PORT=70000"), "MASTER_PORT", "beyond 65535"},
		{"no port after MASTER_PORT", env("RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=h", "MASTER_PORT=65535", "TORCHELASTIC_USE_AGENT_STORE=True"), "MASTER_PORT",
			"65535: torchrun's agent holds it (TORCHELASTIC_USE_AGENT_STORE=True) and task 0's server takes the port after it, which would be 65536, past the last"},
		{"RANK beyond WORLD_SIZE", env("RANK=3", "WORLD_SIZE=3", "MASTER_ADDR=h", "MASTER_PORT=1"), "RANK", "3 is beyond WORLD_SIZE 3"},
		{"no WORLD_SIZE", env("RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1"), "WORLD_SIZE", "not set"},
		{"no RANK", env("WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1"), "RANK", "not set"},
		{"LOCAL_RANK off its RANK", env("RANK=2", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=1"), "LOCAL_RANK", "is not RANK 2"},
		{"LOCAL_WORLD_SIZE not dividing", env("RANK=0", "WORLD_SIZE=3", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1"), "LOCAL_WORLD_SIZE", "does not divide WORLD_SIZE 3"},
		{"Slurm's and torchrun's, not torchrun's doing", slurmTask("0", "RANK=1", "WORLD_SIZE=3", "MASTER_ADDR=vm", "MASTER_PORT=29500"), "RANK",
			"1 is set, and so are Slurm's variables (SLURM_PROCID 0 of SLURM_NTASKS 3), but no TORCHELASTIC_RUN_ID says torchrun started this process"},
		{"Slurm's and a WORLD_SIZE", slurmTask("0", "WORLD_SIZE=3"), "WORLD_SIZE", "3 is set, and so are Slurm's variables"},
		{"an Indexed Job without WORLD_SIZE", env("JOB_COMPLETION_INDEX=0", "MASTER_ADDR=h", "MASTER_PORT=1"), "WORLD_SIZE", "its completions"},
		{"an Indexed Job's index beyond", env("JOB_COMPLETION_INDEX=4", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1"), "JOB_COMPLETION_INDEX", "4 is beyond WORLD_SIZE 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectEnv(tc.env)
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != tc.varName || !strings.Contains(ee.Msg, tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %+v, %v; want an EnvError on %s saying %q", got, err, tc.varName, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), tc.varName+": ") {
				t.Fatalf("%q does not start with the variable", err)
			}
		})
	}
}

// TestExpandTaskCounts: Slurm's per-node counts.
func TestExpandTaskCounts(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []int // nil: refused
	}{
		{"3", []int{3}},
		{"2(x3)", []int{2, 2, 2}},
		{"2(x2),1", []int{2, 2, 1}},
		{"", nil},
		{"0", nil},
		{"2(x)", nil},
		{"2(x0)", nil},
		{"a", nil},
		{"2(x99999999)", nil},
	} {
		got, err := ExpandTaskCounts(tc.spec)
		if tc.want == nil && err == nil || tc.want != nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.spec, got, err, tc.want)
		}
	}
}
