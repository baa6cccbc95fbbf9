package supervise

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// A pool is a set of long-lived agents (Agent) that coordinators take
// workers from (PoolLauncher). Its subjects:
//
//	graphpipe.pool.NAME.adverts        every agent's Advert, every heartbeat
//	graphpipe.pool.NAME.agent.ID       offers, stops and releases to one agent
//	graphpipe.pool.NAME.claims.CLAIM   agents' answers to one coordinator
//
// An agent is taken in two steps: the coordinator offers it a slot of a
// generation, and counts it only once it has confirmed; an agent that was
// not heard within the heartbeat timeout is never offered anything.
func poolAdverts(pool string) string       { return "graphpipe.pool." + pool + ".adverts" }
func poolAgent(pool, agent string) string  { return "graphpipe.pool." + pool + ".agent." + agent }
func poolClaims(pool, claim string) string { return "graphpipe.pool." + pool + ".claims." + claim }

// Advert is what an agent says of itself on its pool's subject.
type Advert struct {
	Agent   string `json:"agent"`   // its id, random
	Host    string `json:"host"`    // its host's label (--host; os.Hostname)
	PID     int    `json:"pid"`     // its process
	Device  string `json:"device"`  // "cpu", or its GPU
	Profile string `json:"profile"` // the device profile it plans as ("cpu", "h100", ...)
	// Memory is its device's, in bytes (the GPU's, or its host's for the
	// CPU); 0: not said.
	Memory int64 `json:"memory,omitempty"`
	// Claim is the coordinator (a PoolLauncher's claim) holding it, "" while
	// it is free; Run and Gen, what it serves or last served.
	Claim string `json:"claim,omitempty"`
	Run   string `json:"run,omitempty"`
	Gen   uint32 `json:"gen,omitempty"`
}

// agentOrder is a message to one agent.
type agentOrder struct {
	Kind  string `json:"kind"` // orderOffer, orderStop, orderRelease
	Claim string `json:"claim"`
	Run   string `json:"run,omitempty"`
	Gen   uint32 `json:"gen,omitempty"`
	Slot  Slot   `json:"slot"`
	// Coordinator says who offers: its host and pid.
	Coordinator string `json:"coordinator,omitempty"`
	// Timings, with an offer, are the run's (the coordinator's): the
	// agent it takes is held while the coordinator is heard within their
	// heartbeat timeout, not the agent's own.
	Timings *runtime.Timings `json:"timings,omitempty"`
}

const (
	orderOffer   = "offer"   // join generation Gen of Run as Slot's worker
	orderStop    = "stop"    // leave generation Gen at once: it failed
	orderRelease = "release" // the run is over: back to the pool
)

// agentAnswer is an agent's answer to an offer.
type agentAnswer struct {
	Agent string `json:"agent"`
	Gen   uint32 `json:"gen"`
	OK    bool   `json:"ok"`
	Why   string `json:"why,omitempty"` // why not
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CheckPoolName refuses a pool name that is not one NATS subject token.
func CheckPoolName(name string) error {
	if name == "" || strings.ContainsAny(name, ".*> \t\r\n") {
		return fmt.Errorf("pool name %q: want one NATS subject token (no '.', '*', '>' or spaces)", name)
	}
	return nil
}

// PlacementError is a pool that cannot honour a plan's nodes: no way to put
// each node's workers on agents of one host.
type PlacementError struct {
	Pool  string
	Nodes []int          // per plan node (that has workers), its workers
	Hosts map[string]int // per host, its free live agents (per host and profile, with Kinds)
	// Kinds: the plan's stages run on several device kinds, each node's on
	// agents of its profile
	Kinds bool
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("pool %s: %s", e.Pool, e.Reason())
}

// Reason is the error without the pool's name.
func (e *PlacementError) Reason() string {
	hosts := make([]string, 0, len(e.Hosts))
	for h := range e.Hosts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for i, h := range hosts {
		hosts[i] = fmt.Sprintf("%s (%d)", h, e.Hosts[h])
	}
	nodes := make([]string, len(e.Nodes))
	for i, n := range e.Nodes {
		nodes[i] = fmt.Sprint(n)
	}
	if e.Kinds {
		return fmt.Sprintf("cannot honour the plan's nodes and device kinds: the plan puts %s workers on its %d nodes, each node's on one host and on agents of its node's device profile, but the pool has %s free agents (by host [profile]); start agents with the profiles the plan's kinds name (graphpipe worker --pool --device-profile)",
			strings.Join(nodes, "+"), len(e.Nodes), strings.Join(hosts, ", "))
	}
	return fmt.Sprintf("cannot honour the plan's nodes: the plan puts %s workers on its %d nodes, each node's on one host, but the pool's hosts have %s free agents; start agents so that one host holds each node's, or search with --devices-per-node for the hosts there are",
		strings.Join(nodes, "+"), len(e.Nodes), strings.Join(hosts, ", "))
}

// DeviceError is a pool whose live agents are enough for a plan's slots
// but too few of them of the plan's device (plan.SameDevice) with the
// memory its stages need: the same agents would be refused again; the user
// must start agents of that device or plan for the agents' own.
type DeviceError struct {
	Pool   string
	Plan   string         // the plan's device profile (its kinds', joined)
	Need   int64          // the most bytes a slot's device holds
	Slots  int            // the plan's workers
	Match  int            // the live agents that match a slot
	Agents map[string]int // per profile (with its memory), the live agents
}

func (e *DeviceError) Error() string { return fmt.Sprintf("pool %s: %s", e.Pool, e.Reason()) }

// Reason is the error without the pool's name.
func (e *DeviceError) Reason() string {
	var have []string
	for a, n := range e.Agents {
		have = append(have, fmt.Sprintf("%d × %s", n, a))
	}
	sort.Strings(have)
	return fmt.Sprintf("the plan is for %s devices (up to %.3g GB a worker), but %d of the pool's free agents match and it needs %d; the agents are %s: start agents with graphpipe worker --pool %s --device-profile %s, or plan for the agents' device (search --device)",
		e.Plan, float64(e.Need)/1e9, e.Match, e.Slots, strings.Join(have, ", "), e.Pool, e.Plan)
}

// matching is the agents that can take a slot of slots: each of a device
// of a slot's profile (plan.SameDevice), with as much memory as the
// largest need of that profile's slots where it says its own; and, where
// too few can for all of them, the *DeviceError that says so.
func matching(pool string, slots []Slot, agents []Advert) ([]Advert, error) {
	e := &DeviceError{Pool: pool, Slots: len(slots), Agents: map[string]int{}}
	need := map[string]int64{} // per profile, the most bytes of its slots
	var profiles []string
	for _, s := range slots {
		if _, ok := need[s.Profile]; !ok {
			profiles = append(profiles, s.Profile)
		}
		need[s.Profile] = max(need[s.Profile], s.Memory)
		e.Need = max(e.Need, s.Memory)
	}
	e.Plan = strings.Join(profiles, " and ")
	var out []Advert
	for _, a := range agents {
		what := a.Profile
		if a.Memory > 0 {
			what = fmt.Sprintf("%s (%.3g GB)", a.Profile, float64(a.Memory)/1e9)
		}
		e.Agents[what]++
		for _, p := range profiles {
			if (p == "" || plan.SameDevice(p, a.Profile)) && (a.Memory == 0 || a.Memory >= need[p]) {
				out = append(out, a)
				break
			}
		}
	}
	if e.Match = len(out); e.Match < len(slots) {
		return out, e
	}
	return out, nil
}

// place gives each slot an agent: the slots of one plan node all to agents
// of one host, whatever order the agents came in (a node to a host by a
// search over hosts, agents on a host by id). It fails with a
// *PlacementError when no such placement exists.
func place(pool string, slots []Slot, agents []Advert) (map[int]Advert, error) {
	byNode := map[int][]Slot{}
	var nodes []int
	kinds := false // a plan of several device kinds: a node's slots go to agents of its kind
	for _, s := range slots {
		if len(byNode[s.Node]) == 0 {
			nodes = append(nodes, s.Node)
		}
		byNode[s.Node] = append(byNode[s.Node], s)
		kinds = kinds || s.Kind != ""
	}
	byHost := map[string][]Advert{} // by host, or by host and profile where kinds
	var hosts []string
	for _, a := range agents {
		h := a.Host
		if kinds {
			h = hostKind(a.Host, a.Profile)
		}
		if len(byHost[h]) == 0 {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], a)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		sort.Slice(byHost[h], func(i, j int) bool { return byHost[h][i].Agent < byHost[h][j].Agent })
	}
	// the largest nodes first; each to a host with room, fullest fit first
	sort.SliceStable(nodes, func(i, j int) bool { return len(byNode[nodes[i]]) > len(byNode[nodes[j]]) })
	free := map[string]int{}
	for _, h := range hosts {
		free[h] = len(byHost[h])
	}
	hostOf := map[int]string{}
	if !fitNodes(nodes, byNode, hosts, free, hostOf) {
		e := &PlacementError{Pool: pool, Hosts: map[string]int{}, Kinds: kinds}
		sort.Ints(nodes)
		for _, n := range nodes {
			e.Nodes = append(e.Nodes, len(byNode[n]))
		}
		for _, h := range hosts {
			e.Hosts[h] = len(byHost[h])
		}
		return nil, e
	}
	out := map[int]Advert{}
	used := map[string]int{}
	sort.Ints(nodes)
	for _, n := range nodes {
		h := hostOf[n]
		for _, s := range byNode[n] {
			out[s.Worker] = byHost[h][used[h]]
			used[h]++
		}
	}
	return out, nil
}

// hostKind keys a host's agents of one profile, on a plan of several kinds.
func hostKind(host, profile string) string { return host + " [" + profile + "]" }

// fitNodes puts nodes[0:] on hosts with room (free), backtracking; hostOf
// receives the answer. On a plan of several kinds hosts are keyed by host
// and profile (hostKind), and a node goes to agents of its kind only.
func fitNodes(nodes []int, byNode map[int][]Slot, hosts []string, free map[string]int, hostOf map[int]string) bool {
	if len(nodes) == 0 {
		return true
	}
	n, need := nodes[0], len(byNode[nodes[0]])
	order := append([]string(nil), hosts...)
	sort.SliceStable(order, func(i, j int) bool { return free[order[i]] < free[order[j]] }) // best fit first
	for _, h := range order {
		if k := byNode[n][0].Kind; k != "" && !strings.HasSuffix(h, " ["+k+"]") || free[h] < need {
			continue
		}
		free[h] -= need
		hostOf[n] = h
		if fitNodes(nodes[1:], byNode, hosts, free, hostOf) {
			return true
		}
		free[h] += need
		delete(hostOf, n)
	}
	return false
}
