package supervise

import (
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// The tasks of a run an environment started (Task, TaskLauncher) and
// their coordinator, task 0, talk on two subjects of the run:
//
//	graphpipe.RUN.tasks.adverts   every task's TaskAdvert, every heartbeat
//	graphpipe.RUN.tasks.orders    task 0's TaskOrder to all of them
//
// An order names a generation and the plan device of each task that joins
// it; it is said again every heartbeat until each of them says it serves
// that generation, so that a task that starts late (or again) hears it.
// The order that ends the run is said again until every task has said it
// leaves (or fallen silent), before task 0 shuts its server down.
func tasksAdverts(run string) string { return "graphpipe." + run + ".tasks.adverts" }
func tasksOrders(run string) string  { return "graphpipe." + run + ".tasks.orders" }

// TaskAdvert is what a task says of itself every heartbeat.
type TaskAdvert struct {
	Rank    int    `json:"rank"`
	Node    int    `json:"node"`
	Local   int    `json:"local"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Device  string `json:"device"`            // where it computes: "cpu", or its GPU
	Visible string `json:"visible,omitempty"` // its CUDA_VISIBLE_DEVICES, for one started in its place
	GPU     int    `json:"gpu"`               // its GPU ordinal (after Visible), -1 for none
	Gen     uint32 `json:"gen,omitempty"`     // the generation it serves or last joined
	Left    bool   `json:"left,omitempty"`    // its last word: it is leaving
	// Tasks, Model and Started say which launch it is of: how many tasks
	// its environment says there are, a digest of the model and plan it
	// was given ("": not said) and when its process started (zero: not
	// said). Task 0 refuses a task of another launch (TaskOrder.Refuse).
	Tasks   int       `json:"tasks,omitempty"`
	Model   string    `json:"model,omitempty"`
	Started time.Time `json:"started,omitzero"`
}

// TaskOrder is task 0's word to the tasks: join generation Gen, each as
// the plan device Devices names for its rank (a task not named has no
// stage, and leaves); leave generation Gen (Stop: it failed); or leave,
// the run being over (End), with Failed saying why when it failed: the
// tasks then exit with an error too, so that an environment that reruns
// failed tasks (a Kubernetes Indexed Job) does not count them completed.
type TaskOrder struct {
	Gen     uint32           `json:"gen,omitempty"`
	Devices map[int]int      `json:"devices,omitempty"`
	Stop    bool             `json:"stop,omitempty"`
	End     bool             `json:"end,omitempty"`
	Failed  string           `json:"failed,omitempty"`
	Timings *runtime.Timings `json:"timings,omitempty"` // the run's
	// Refuse names a task task 0 will not have: it leaves with a
	// *RefusedError; the others take no notice.
	Refuse *TaskRefusal `json:"refuse,omitempty"`
}

// TaskRefusal is a task task 0 refuses, as its advert names it, and why.
type TaskRefusal struct {
	Rank    int       `json:"rank"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started,omitzero"`
	Why     string    `json:"why"`
}

// names says the refusal is of the task that advertises ad.
func (r *TaskRefusal) names(ad TaskAdvert) bool {
	return r.Rank == ad.Rank && r.Host == ad.Host && r.PID == ad.PID && r.Started.Equal(ad.Started)
}

// RefusedError is a task's end when task 0 refused it: it is of another
// launch (a second job started by mistake in the same directory on the
// same address and port, whose tasks found the running job's rendezvous
// file), which the running job does not let in.
type RefusedError struct {
	Run, RankVar string
	Rank         int
	Why          string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s %d: refused by task 0 of run %s, which trains on: %s", e.RankVar, e.Rank, e.Run, e.Why)
}

// RunFailedError is a task's end when task 0 ended the run as failed.
type RunFailedError struct {
	Run, Why string
}

func (e *RunFailedError) Error() string { return fmt.Sprintf("run %s failed: %s", e.Run, e.Why) }

// CheckPlanOnTasks refuses a plan the environment's tasks cannot run, one
// task per device: as many tasks as the plan has devices, on as many
// nodes, as many on each node as the plan puts there. The *EnvError names
// the variable that says otherwise.
func CheckPlanOnTasks(p *plan.Plan, e *TaskEnv) error {
	if p.Devices != e.Tasks {
		return envErr(e.TasksVar, "%d tasks, but the plan runs on %d devices: start one task per device of the plan", e.Tasks, p.Devices)
	}
	per := devicesPerNode(p)
	if len(per) != e.Nodes {
		return envErr(e.PerNodeVar, "%d tasks on each of %d nodes, but the plan puts its %d devices on %d nodes (%s): plan for %d devices per node, or start the tasks so",
			e.PerNode, e.Nodes, p.Devices, len(per), nodesWord(per), e.PerNode)
	}
	for n, c := range per {
		if c != e.PerNode {
			return envErr(e.PerNodeVar, "%d tasks on each node, but the plan puts %d devices on node %d (%s): plan for %d devices per node, or start the tasks so",
				e.PerNode, c, n, nodesWord(per), e.PerNode)
		}
	}
	return nil
}

// devicesPerNode is how many of the plan's devices each of its nodes has.
func devicesPerNode(p *plan.Plan) []int {
	var per []int
	for d := range p.Devices {
		n := p.NodeOf(d)
		for len(per) <= n {
			per = append(per, 0)
		}
		per[n]++
	}
	return per
}

// PlanDevice is the plan device of the task with local rank local on node:
// the node's first device plus local.
func PlanDevice(p *plan.Plan, node, local int) (int, error) {
	for d := range p.Devices {
		if p.NodeOf(d) == node {
			if d+local >= p.Devices || p.NodeOf(d+local) != node {
				return 0, fmt.Errorf("local rank %d is beyond the plan's devices on node %d", local, node)
			}
			return d + local, nil
		}
	}
	return 0, fmt.Errorf("the plan has no node %d", node)
}

func nodesWord(per []int) string {
	s := ""
	for n, c := range per {
		if n > 0 {
			s += ", "
		}
		s += fmt.Sprintf("node %d: %d", n, c)
	}
	return s
}
