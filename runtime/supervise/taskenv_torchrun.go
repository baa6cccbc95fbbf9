package supervise

import (
	"fmt"
	"strings"
)

// torchrunEnv reads torchrun's environment: RANK of WORLD_SIZE, LOCAL_RANK
// of LOCAL_WORLD_SIZE on node GROUP_RANK (when not set: one node, or the
// node RANK and LOCAL_RANK make), rank 0 at MASTER_ADDR:MASTER_PORT. Under
// torchrun's own agent store (TORCHELASTIC_USE_AGENT_STORE=True) the agent
// holds MASTER_PORT, and the server takes the port after it. A GPU is
// CUDA_VISIBLE_DEVICES's, else LOCAL_RANK's (PyTorch's convention).
func torchrunEnv(getenv func(string) string) (*TaskEnv, error) {
	e := &TaskEnv{Source: "torchrun", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE"}
	var err error
	if e.Tasks, err = envInt(getenv, "WORLD_SIZE", 1); err != nil {
		return nil, err
	}
	if e.Rank, err = envInt(getenv, "RANK", 0); err != nil {
		return nil, err
	}
	if err := checkRank("RANK", e.Rank, "WORLD_SIZE", e.Tasks); err != nil {
		return nil, err
	}
	if err := e.torchrunNodes(getenv); err != nil {
		return nil, err
	}
	if err := e.master(getenv); err != nil {
		return nil, err
	}
	if getenv("TORCHELASTIC_USE_AGENT_STORE") == "True" {
		if e.Port++; e.Port > 65535 {
			return nil, envErr("MASTER_PORT", "65535: torchrun's agent holds it (TORCHELASTIC_USE_AGENT_STORE=True) and task 0's server takes the port after it, which would be 65536, past the last: choose a MASTER_PORT below 65535")
		}
	}
	if e.GPU, err = gpuOf(getenv, e.Local, "", e.Local); err != nil {
		return nil, err
	}
	e.Visible = getenv("CUDA_VISIBLE_DEVICES")
	if e.Restart, err = envIntOr(getenv, "TORCHELASTIC_RESTART_COUNT", 0, 0); err != nil {
		return nil, err
	}
	e.Key = fmt.Sprintf("torchrun-%s-%d-%d", keyPart(e.Addr), e.Port, e.Restart)
	return e, nil
}

// torchrunNodes reads the node and local rank: LOCAL_RANK (default RANK)
// of LOCAL_WORLD_SIZE (default WORLD_SIZE: one node) on node GROUP_RANK
// (default the one RANK falls on), checked against one another.
func (e *TaskEnv) torchrunNodes(getenv func(string) string) error {
	var err error
	if e.PerNode, err = envIntOr(getenv, "LOCAL_WORLD_SIZE", 1, e.Tasks); err != nil {
		return err
	}
	if e.Tasks%e.PerNode != 0 {
		return envErr("LOCAL_WORLD_SIZE", "%d does not divide WORLD_SIZE %d: every node runs as many workers", e.PerNode, e.Tasks)
	}
	e.Nodes = e.Tasks / e.PerNode
	if e.Local, err = envIntOr(getenv, "LOCAL_RANK", 0, e.Rank%e.PerNode); err != nil {
		return err
	}
	if e.Local >= e.PerNode {
		return envErr("LOCAL_RANK", "%d is beyond LOCAL_WORLD_SIZE %d", e.Local, e.PerNode)
	}
	if e.Node, err = envIntOr(getenv, "GROUP_RANK", 0, e.Rank/e.PerNode); err != nil {
		return err
	}
	if e.Node >= e.Nodes {
		return envErr("GROUP_RANK", "%d is beyond the %d nodes of WORLD_SIZE %d / LOCAL_WORLD_SIZE %d", e.Node, e.Nodes, e.Tasks, e.PerNode)
	}
	if e.Node*e.PerNode+e.Local != e.Rank {
		return envErr("LOCAL_RANK", "%d on node %d of %d workers each is not RANK %d", e.Local, e.Node, e.PerNode, e.Rank)
	}
	return nil
}

// master reads MASTER_ADDR and MASTER_PORT, where rank 0 listens.
func (e *TaskEnv) master(getenv func(string) string) error {
	e.Addr, e.AddrVar = strings.TrimSpace(getenv("MASTER_ADDR")), "MASTER_ADDR"
	if e.Addr == "" {
		return envErr("MASTER_ADDR", "not set: the other %s tasks reach rank 0 there (%s %d)", e.Source, e.RankVar, e.Rank)
	}
	var err error
	if e.Port, err = envInt(getenv, "MASTER_PORT", 1); err != nil {
		return err
	}
	if e.Port > 65535 {
		return envErr("MASTER_PORT", "%d is beyond 65535", e.Port)
	}
	return nil
}

// kubernetesEnv reads a Kubernetes Indexed Job's pod: JOB_COMPLETION_INDEX
// of WORLD_SIZE (the Job's completions, which the manifest sets), each pod
// a node of its own, pod 0 at MASTER_ADDR:MASTER_PORT (its name under the
// Job's headless service).
func kubernetesEnv(getenv func(string) string) (*TaskEnv, error) {
	e := &TaskEnv{Source: "kubernetes", RankVar: "JOB_COMPLETION_INDEX", TasksVar: "WORLD_SIZE", PerNodeVar: "WORLD_SIZE", PerNode: 1}
	var err error
	if e.Tasks, err = envInt(getenv, "WORLD_SIZE", 1); err != nil {
		return nil, &EnvError{Var: "WORLD_SIZE", Msg: err.(*EnvError).Msg + ": an Indexed Job's pods need it (its completions)"}
	}
	if e.Rank, err = envInt(getenv, "JOB_COMPLETION_INDEX", 0); err != nil {
		return nil, err
	}
	if err := checkRank("JOB_COMPLETION_INDEX", e.Rank, "WORLD_SIZE", e.Tasks); err != nil {
		return nil, err
	}
	e.Node, e.Nodes = e.Rank, e.Tasks
	if err := e.master(getenv); err != nil {
		return nil, err
	}
	if e.GPU, err = gpuOf(getenv, 0, "", -1); err != nil {
		return nil, err
	}
	e.Visible = getenv("CUDA_VISIBLE_DEVICES")
	e.Key = fmt.Sprintf("k8s-%s-%d", keyPart(e.Addr), e.Port)
	return e, nil
}
