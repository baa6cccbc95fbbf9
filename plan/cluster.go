package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// ClusterFormat is the version tag of a cluster file.
const ClusterFormat = "graphpipe/cluster@1"

// Cluster is the devices a plan is made for when they are of more than one
// kind: groups of nodes, each node's devices of one device profile (a
// kind, by the profile's name). A plan's devices are numbered kind by kind,
// in the order the kinds first appear, and its nodes likewise; a stage's
// devices are of one kind (PlanStage.Kind). A cluster of one kind is the
// same as --devices, --device and --devices-per-node.
type Cluster struct {
	Kinds []Kind `json:"kinds"`
	// InterBW and InterLat are the link between two nodes of different
	// kinds (bytes/s, seconds per message); zero: the slower of the two
	// kinds' own links between nodes. Nodes of one kind use their kind's.
	InterBW  float64 `json:"inter_bw,omitempty"`
	InterLat float64 `json:"inter_lat_s,omitempty"`
}

// Kind is one device profile's share of a cluster.
type Kind struct {
	Device         Device `json:"device"`
	Devices        int    `json:"devices"` // in all, over its nodes
	DevicesPerNode int    `json:"devices_per_node"`
	MemoryLimit    int64  `json:"memory_limit_bytes"` // bytes per device the plan keeps within
}

// Name is the kind's name, its profile's.
func (k Kind) Name() string { return k.Device.Name }

// Total is the devices of every kind.
func (c *Cluster) Total() int {
	n := 0
	for _, k := range c.Kinds {
		n += k.Devices
	}
	return n
}

// Base is the first device of kind t (devices are numbered kind by kind).
func (c *Cluster) Base(t int) int {
	b := 0
	for _, k := range c.Kinds[:t] {
		b += k.Devices
	}
	return b
}

// KindIndex is the index of the kind named name, or -1.
func (c *Cluster) KindIndex(name string) int {
	for t, k := range c.Kinds {
		if k.Name() == name {
			return t
		}
	}
	return -1
}

// KindOf is the index of the kind device d is of, or -1 outside the cluster.
func (c *Cluster) KindOf(d int) int {
	for t, k := range c.Kinds {
		if d >= 0 && d < k.Devices {
			return t
		}
		d -= k.Devices
	}
	return -1
}

// NodeOf is the node device d is on: nodes are numbered kind by kind, each
// kind's devices filling its nodes in order.
func (c *Cluster) NodeOf(d int) int {
	node := 0
	for _, k := range c.Kinds {
		if d < k.Devices {
			return node + d/k.DevicesPerNode
		}
		d -= k.Devices
		node += (k.Devices + k.DevicesPerNode - 1) / k.DevicesPerNode
	}
	return -1
}

// Link is the link between a node of kind a and one of kind b (the same
// kind's between two of its nodes): bandwidth and latency.
func (c *Cluster) Link(a, b int) (bw, lat float64) {
	da, db := c.Kinds[a].Device, c.Kinds[b].Device
	if a == b {
		return da.InterBW, da.InterLat
	}
	if c.InterBW > 0 {
		return c.InterBW, c.InterLat
	}
	return math.Min(da.InterBW, db.InterBW), math.Max(da.InterLat, db.InterLat)
}

// ClusterError is one thing wrong with a cluster file: the node group it is
// about (-1: the file as a whole), the field and what is wrong.
type ClusterError struct {
	Group int
	Field string
	Msg   string
}

func (e *ClusterError) Error() string {
	if e.Group < 0 {
		return "cluster: " + e.Field + ": " + e.Msg
	}
	return fmt.Sprintf("cluster: nodes[%d]: %s: %s", e.Group, e.Field, e.Msg)
}

func clusterErr(group int, field, format string, args ...any) error {
	return &ClusterError{group, field, fmt.Sprintf(format, args...)}
}

// clusterFile is a cluster file as written: groups of nodes, each naming its
// device profile by a built-in name, a profile file's path, or inline.
type clusterFile struct {
	Format string      `json:"format"`
	Nodes  []nodeGroup `json:"nodes"`
	Link   *struct {
		Bandwidth float64 `json:"bandwidth"`
		Latency   float64 `json:"latency_s"`
	} `json:"inter_node,omitempty"`
}

type nodeGroup struct {
	Count          int             `json:"count"`
	DevicesPerNode int             `json:"devices_per_node"`
	Device         json.RawMessage `json:"device"`
}

// MaxClusterKinds is the most device kinds a cluster may have.
const MaxClusterKinds = 8

// DecodeCluster reads a cluster file (graphpipe/cluster@1) strictly:
//
//	{"format": "graphpipe/cluster@1",
//	 "nodes": [{"count": 4, "devices_per_node": 4, "device": "v100"},
//	           {"count": 2, "devices_per_node": 8, "device": "a100.json"}],
//	 "inter_node": {"bandwidth": 12.5e9, "latency_s": 20e-6}}
//
// Each group of nodes names its device profile: a built-in name, a profile
// file (read by readFile, relative to the cluster file as the caller sees
// fit), or a profile object inline. Groups of one profile make one kind
// (they must agree on the profile and on devices per node). inter_node,
// optional, is the link between nodes of different kinds (default: the
// slower of their own). A missing, unknown or non-positive field is refused
// with a ClusterError naming it; memory limits are each profile's memory.
func DecodeCluster(data []byte, readFile func(path string) ([]byte, error)) (*Cluster, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, clusterErr(-1, "format", "the file is empty: not a cluster file")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f clusterFile
	if err := dec.Decode(&f); err != nil {
		return nil, clusterErr(-1, "format", "not a cluster file: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, clusterErr(-1, "format", "unexpected data after the closing brace")
	}
	if f.Format != ClusterFormat {
		return nil, clusterErr(-1, "format", "is %q, want %q", f.Format, ClusterFormat)
	}
	if len(f.Nodes) == 0 {
		return nil, clusterErr(-1, "nodes", "a cluster needs at least one group of nodes")
	}
	c := &Cluster{}
	if f.Link != nil {
		if err := firstErr(rate("bandwidth", f.Link.Bandwidth), seconds("latency_s", f.Link.Latency)); err != nil {
			return nil, clusterErr(-1, "inter_node", "%v", err)
		}
		c.InterBW, c.InterLat = f.Link.Bandwidth, f.Link.Latency
	}
	for i, g := range f.Nodes {
		if g.Count < 1 || g.DevicesPerNode < 1 || g.Count > MaxDevices || g.DevicesPerNode > MaxDevices || g.Count*g.DevicesPerNode > MaxDevices {
			return nil, clusterErr(i, "count, devices_per_node", "must be positive and make at most %d devices, got %d × %d", MaxDevices, g.Count, g.DevicesPerNode)
		}
		dev, err := groupDevice(g.Device, readFile)
		if err != nil {
			return nil, clusterErr(i, "device", "%v", err)
		}
		t := c.KindIndex(dev.Name)
		if t < 0 {
			if len(c.Kinds) == MaxClusterKinds {
				return nil, clusterErr(i, "device", "more than %d device kinds", MaxClusterKinds)
			}
			c.Kinds = append(c.Kinds, Kind{Device: dev, DevicesPerNode: g.DevicesPerNode, MemoryLimit: dev.Memory})
			t = len(c.Kinds) - 1
		}
		k := &c.Kinds[t]
		switch {
		case k.Device != dev:
			return nil, clusterErr(i, "device", "profile %q differs from an earlier group's of that name", dev.Name)
		case k.DevicesPerNode != g.DevicesPerNode:
			return nil, clusterErr(i, "devices_per_node", "%d, but an earlier group of %q has %d: a kind's nodes are alike", g.DevicesPerNode, dev.Name, k.DevicesPerNode)
		}
		k.Devices += g.Count * g.DevicesPerNode
		if c.Total() > MaxDevices {
			return nil, clusterErr(i, "count", "the cluster has more than %d devices", MaxDevices)
		}
	}
	return c, nil
}

// groupDevice reads a group's device: a built-in profile's name, a profile
// file's path, or a profile inline.
func groupDevice(raw json.RawMessage, readFile func(string) ([]byte, error)) (Device, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Device{}, fmt.Errorf("required: a profile's name, a profile file or a profile")
	}
	if raw[0] == '{' {
		return ParseDevice(raw)
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return Device{}, fmt.Errorf("want a profile's name, a profile file or a profile, got %s", raw)
	}
	if d, err := LookupDevice(name); err == nil {
		return d, nil
	}
	if readFile == nil || !strings.HasSuffix(strings.ToLower(name), ".json") && !strings.ContainsAny(name, `/\`) {
		_, err := LookupDevice(name)
		return Device{}, err
	}
	data, err := readFile(name)
	if err != nil {
		return Device{}, fmt.Errorf("%s: %v", name, err)
	}
	d, err := ParseDevice(data)
	if err != nil {
		return Device{}, fmt.Errorf("%s: %v", name, err)
	}
	return d, nil
}

// validate checks a plan's cluster: kinds, their devices and memory, and
// that they make the plan's devices.
func (c *Cluster) validate(devices int) error {
	if len(c.Kinds) < 2 || len(c.Kinds) > MaxClusterKinds {
		return planErr(-1, "cluster.kinds", "a plan's cluster has 2 to %d kinds (one kind is --device), got %d", MaxClusterKinds, len(c.Kinds))
	}
	for t, k := range c.Kinds {
		field := fmt.Sprintf("cluster.kinds[%d]", t)
		if err := k.Device.Validate(); err != nil {
			return planErr(-1, field+".device", "%v", err)
		}
		if c.KindIndex(k.Name()) != t {
			return planErr(-1, field+".device", "kind %q is also an earlier kind", k.Name())
		}
		if k.Devices < 1 || k.DevicesPerNode < 1 || k.MemoryLimit < 0 {
			return planErr(-1, field, "devices and devices_per_node must be positive and memory_limit_bytes not negative, got %d, %d, %d", k.Devices, k.DevicesPerNode, k.MemoryLimit)
		}
	}
	if c.Total() != devices {
		return planErr(-1, "cluster.kinds", "make %d devices, but the plan has %d", c.Total(), devices)
	}
	if err := optionalRate("inter_bw", c.InterBW); err != nil {
		return planErr(-1, "cluster.inter_bw", "%v", err)
	}
	if err := seconds("inter_lat_s", c.InterLat); err != nil {
		return planErr(-1, "cluster.inter_lat_s", "%v", err)
	}
	return nil
}
