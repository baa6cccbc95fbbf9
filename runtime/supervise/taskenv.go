package supervise

import (
	"fmt"
	"strconv"
	"strings"
)

// TaskEnv is what an environment that started every task of a run with the
// same command (Slurm's srun, torchrun, a Kubernetes Indexed Job) says of
// one of them: its rank (0 coordinates), how many tasks there are and how
// they sit on nodes, where task 0 is, and which GPU is this task's.
type TaskEnv struct {
	// Source names the environment: "slurm", "torchrun" or "kubernetes".
	Source string
	// RankVar is the variable the rank came from (SLURM_PROCID, RANK,
	// JOB_COMPLETION_INDEX): messages name it.
	RankVar string
	Rank    int // this task's, 0 to Tasks-1: 0 coordinates
	Tasks   int
	// TasksVar and PerNodeVar are the variables that said how many tasks
	// there are and how many on each node.
	TasksVar, PerNodeVar string
	// Node is this task's node (0 to Nodes-1) and Local its rank on it;
	// PerNode is the tasks on each node, alike on every node.
	Node, Local, Nodes, PerNode int
	// Hosts are the nodes' host names in node order (Slurm's node list),
	// nil where the environment does not say them.
	Hosts []string
	// Addr is where task 0's NATS server listens and the others reach it:
	// its node's host (Slurm), MASTER_ADDR (torchrun, Kubernetes); AddrVar
	// is the variable that says it, for messages.
	Addr, AddrVar string
	// Port is the server's port, 0 for any (the rendezvous file then says
	// which).
	Port int
	// GPU is this task's GPU ordinal as its process sees them (after
	// CUDA_VISIBLE_DEVICES), -1 when the environment gives it none.
	GPU int
	// Visible is CUDA_VISIBLE_DEVICES as the task has it ("" unset): a task
	// started again in its place is given the same.
	Visible string
	// Key names this launch of the run, alike in all its tasks and
	// different in the next launch (a requeued job, a new step, a restart
	// of torchrun's workers): it scopes the rendezvous file and the run ID.
	Key string
	// Restart counts the launches before this one (SLURM_RESTART_COUNT,
	// TORCHELASTIC_RESTART_COUNT).
	Restart int
	// JobID is Slurm's job id, "" elsewhere: a lost task is started again
	// within the allocation (srun --jobid).
	JobID string
	// Outer, when another launcher's variables are set too (Slurm's, around
	// torchrun: 'srun torchrun ... graphpipe run'), says whose and what
	// they say: the environment read is the innermost launcher's, the one
	// that started this process, and the command says so.
	Outer string
}

// EnvError is an environment variable that does not describe a task of a
// run: the variable and what is wrong with it.
type EnvError struct {
	Var, Msg string
}

func (e *EnvError) Error() string { return e.Var + ": " + e.Msg }

func envErr(v, format string, args ...any) *EnvError {
	return &EnvError{Var: v, Msg: fmt.Sprintf(format, args...)}
}

// DetectEnv reads the environment getenv gives: a Slurm job step's task
// (SLURM_PROCID and SLURM_STEP_ID: a batch script itself is not a task),
// torchrun's (RANK, WORLD_SIZE) or a Kubernetes Indexed Job's pod
// (JOB_COMPLETION_INDEX). It returns nil when none of them started this
// process, and an *EnvError naming the variable at fault when one did but
// said too little or something inconsistent.
//
// Slurm's variables and torchrun's together are 'srun torchrun': torchrun,
// which started this process, is followed, and Outer says so. Without
// TORCHELASTIC_RUN_ID, which torchrun sets, they are an *EnvError naming
// both: the rank is not this process's in one of them, and which is not
// for graphpipe to guess.
func DetectEnv(getenv func(string) string) (*TaskEnv, error) {
	slurm := getenv("SLURM_PROCID") != "" && getenv("SLURM_STEP_ID") != ""
	torch := getenv("RANK") != "" || getenv("WORLD_SIZE") != "" && getenv("JOB_COMPLETION_INDEX") == ""
	switch {
	case slurm && torch:
		return torchrunInSlurm(getenv)
	case slurm:
		return slurmEnv(getenv)
	case torch:
		return torchrunEnv(getenv)
	case getenv("JOB_COMPLETION_INDEX") != "":
		return kubernetesEnv(getenv)
	}
	return nil, nil
}

// torchrunInSlurm reads torchrun's environment inside a Slurm task's.
func torchrunInSlurm(getenv func(string) string) (*TaskEnv, error) {
	slurm := fmt.Sprintf("SLURM_PROCID %s of SLURM_NTASKS %s", getenv("SLURM_PROCID"), getenv("SLURM_NTASKS"))
	if getenv("TORCHELASTIC_RUN_ID") == "" {
		v := "RANK"
		if getenv(v) == "" {
			v = "WORLD_SIZE"
		}
		return nil, envErr(v, "%s is set, and so are Slurm's variables (%s), but no TORCHELASTIC_RUN_ID says torchrun started this process: start graphpipe with srun alone (unset RANK and WORLD_SIZE) or with 'srun torchrun'", getenv(v), slurm)
	}
	e, err := torchrunEnv(getenv)
	if err != nil {
		return nil, err
	}
	e.Outer = "Slurm's (" + slurm + ")"
	return e, nil
}

// envInt reads variable v as an integer of at least lo; "" is missing.
func envInt(getenv func(string) string, v string, lo int) (int, error) {
	s := strings.TrimSpace(getenv(v))
	if s == "" {
		return 0, envErr(v, "not set")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, envErr(v, "%q is not a whole number", s)
	}
	if n < lo {
		return 0, envErr(v, "%d: must be at least %d", n, lo)
	}
	return n, nil
}

// envIntOr is envInt, or def when v is not set.
func envIntOr(getenv func(string) string, v string, lo, def int) (int, error) {
	if strings.TrimSpace(getenv(v)) == "" {
		return def, nil
	}
	return envInt(getenv, v, lo)
}

// checkRank refuses a rank beyond the tasks.
func checkRank(rankVar string, rank int, tasksVar string, tasks int) error {
	if rank >= tasks {
		return envErr(rankVar, "%d is beyond %s %d (ranks 0 to %d)", rank, tasksVar, tasks, tasks-1)
	}
	return nil
}

// gpuOf is a task's GPU ordinal from CUDA_VISIBLE_DEVICES, or from stepGPUs
// (Slurm's SLURM_STEP_GPUS, physical ordinals, when CUDA_VISIBLE_DEVICES
// is unset): the only visible one, else the local-th; none (def) with
// neither.
func gpuOf(getenv func(string) string, local int, stepGPUsVar string, def int) (int, error) {
	list, v, physical := strings.TrimSpace(getenv("CUDA_VISIBLE_DEVICES")), "CUDA_VISIBLE_DEVICES", false
	if list == "" && stepGPUsVar != "" {
		list, v, physical = strings.TrimSpace(getenv(stepGPUsVar)), stepGPUsVar, true
	}
	if list == "" {
		return def, nil
	}
	if list == "NoDevFiles" {
		return -1, nil
	}
	gpus := strings.Split(list, ",")
	switch {
	case len(gpus) == 1 && !physical:
		return 0, nil
	case local >= len(gpus):
		return 0, envErr(v, "%q lists %d GPUs, too few for local rank %d: give each task its GPU (--gpus-per-task=1) or as many GPUs as tasks on the node", list, len(gpus), local)
	case !physical:
		return local, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(gpus[local]))
	if err != nil || n < 0 {
		return 0, envErr(v, "%q: entry %q is not a GPU index", list, gpus[local])
	}
	return n, nil
}

// keyPart is s made fit for a run ID and a file name: letters, digits, '-'
// and '_', anything else a '-'.
func keyPart(s string) string {
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			return c
		}
		return '-'
	}, s)
}
