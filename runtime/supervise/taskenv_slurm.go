package supervise

import (
	"fmt"
	"strconv"
	"strings"
)

// slurmEnv reads a Slurm job step's task: SLURM_PROCID of SLURM_NTASKS,
// on node SLURM_NODEID of the step's node list (SLURM_STEP_NODELIST, else
// SLURM_JOB_NODELIST) as rank SLURM_LOCALID there, the tasks on each node
// (SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE), its GPU
// (CUDA_VISIBLE_DEVICES, else SLURM_STEP_GPUS). Task 0 runs on the step's
// first node, whose host its server listens on.
func slurmEnv(getenv func(string) string) (*TaskEnv, error) {
	e := &TaskEnv{Source: "slurm", RankVar: "SLURM_PROCID", TasksVar: "SLURM_NTASKS", JobID: getenv("SLURM_JOB_ID")}
	var err error
	if e.Tasks, err = envInt(getenv, "SLURM_NTASKS", 1); err != nil {
		return nil, err
	}
	if e.Rank, err = envInt(getenv, "SLURM_PROCID", 0); err != nil {
		return nil, err
	}
	if err := checkRank("SLURM_PROCID", e.Rank, "SLURM_NTASKS", e.Tasks); err != nil {
		return nil, err
	}
	if err := e.slurmNodes(getenv); err != nil {
		return nil, err
	}
	if e.GPU, err = gpuOf(getenv, e.Local, "SLURM_STEP_GPUS", -1); err != nil {
		return nil, err
	}
	e.Visible = getenv("CUDA_VISIBLE_DEVICES")
	if e.Restart, err = envIntOr(getenv, "SLURM_RESTART_COUNT", 0, 0); err != nil {
		return nil, err
	}
	if e.JobID == "" {
		return nil, envErr("SLURM_JOB_ID", "not set")
	}
	e.Key = fmt.Sprintf("slurm-%s-%s-%d", keyPart(e.JobID), keyPart(getenv("SLURM_STEP_ID")), e.Restart)
	return e, nil
}

// slurmNodes reads the step's nodes, this task's node and local rank, and
// the tasks on each node, which must be alike.
func (e *TaskEnv) slurmNodes(getenv func(string) string) error {
	listVar := "SLURM_STEP_NODELIST"
	if getenv(listVar) == "" {
		listVar = "SLURM_JOB_NODELIST"
	}
	hosts, err := ExpandHostlist(getenv(listVar))
	if err != nil {
		return envErr(listVar, "%v", err)
	}
	e.Hosts, e.Nodes, e.Addr, e.AddrVar = hosts, len(hosts), hosts[0], listVar
	if e.Node, err = envInt(getenv, "SLURM_NODEID", 0); err != nil {
		return err
	}
	if e.Node >= e.Nodes {
		return envErr("SLURM_NODEID", "%d is beyond the %d nodes of %s %s", e.Node, e.Nodes, listVar, getenv(listVar))
	}
	if e.PerNode, e.PerNodeVar, err = slurmPerNode(getenv, e.Tasks, e.Nodes); err != nil {
		return err
	}
	if e.Local, err = envInt(getenv, "SLURM_LOCALID", 0); err != nil {
		return err
	}
	if e.Local >= e.PerNode {
		return envErr("SLURM_LOCALID", "%d is beyond the %d tasks of its node", e.Local, e.PerNode)
	}
	return nil
}

// slurmPerNode is the tasks on each node (SLURM_STEP_TASKS_PER_NODE, else
// SLURM_TASKS_PER_NODE, else tasks/nodes), refusing nodes with different
// counts or counts that do not add up to the tasks.
func slurmPerNode(getenv func(string) string, tasks, nodes int) (int, string, error) {
	v := "SLURM_STEP_TASKS_PER_NODE"
	if getenv(v) == "" {
		v = "SLURM_TASKS_PER_NODE"
	}
	spec := getenv(v)
	if spec == "" {
		if tasks%nodes != 0 {
			return 0, "", envErr("SLURM_NTASKS", "%d tasks do not spread evenly over %d nodes (--ntasks-per-node)", tasks, nodes)
		}
		return tasks / nodes, "SLURM_NTASKS", nil
	}
	counts, err := ExpandTaskCounts(spec)
	if err != nil {
		return 0, "", envErr(v, "%v", err)
	}
	sum := 0
	for _, c := range counts {
		sum += c
		if c != counts[0] {
			return 0, "", envErr(v, "%q: the nodes run different numbers of tasks; a plan's nodes are alike (--ntasks-per-node)", spec)
		}
	}
	switch {
	case len(counts) != nodes:
		return 0, "", envErr(v, "%q counts %d nodes, but the node list has %d", spec, len(counts), nodes)
	case sum != tasks:
		return 0, "", envErr(v, "%q counts %d tasks, but SLURM_NTASKS is %d", spec, sum, tasks)
	}
	return counts[0], v, nil
}

// ExpandTaskCounts expands Slurm's per-node counts, "2(x3),1" being 2, 2, 2
// and 1 (SLURM_TASKS_PER_NODE's syntax).
func ExpandTaskCounts(spec string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(spec, ",") {
		count, times := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, times = part[:i], part[i+2:len(part)-1]
		}
		c, err1 := strconv.Atoi(count)
		n, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || c < 1 || n < 1 || n > MaxHosts || len(out)+n > MaxHosts {
			return nil, fmt.Errorf("%q: %q is neither a count nor COUNT(xTIMES)", spec, part)
		}
		for range n {
			out = append(out, c)
		}
	}
	return out, nil
}
