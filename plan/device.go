package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Device is what the cost model knows about one accelerator and its links.
// Rates are per second; sizes in bytes. docs/planner.md gives the
// sources of the built-in numbers.
type Device struct {
	Name      string  `json:"name"`
	PeakFLOPs float64 `json:"peak_flops"` // fp32 FLOP/s
	// Rates are the matrix products' peak FLOP/s in the precisions beyond
	// fp32 the device has (precision.go); absent or 0: none.
	Rates    Rates   `json:"rates,omitzero"`
	MaxEff   float64 `json:"max_eff"`     // fraction of peak reached by large kernels
	HalfWork float64 `json:"half_work"`   // FLOPs in one kernel call at which it reaches MaxEff/2
	MemBW    float64 `json:"mem_bw"`      // device memory bytes/s
	Memory   int64   `json:"memory"`      // bytes per device
	Launch   float64 `json:"launch_s"`    // seconds of fixed overhead per op call
	IntraBW  float64 `json:"intra_bw"`    // bytes/s between devices in one node
	InterBW  float64 `json:"inter_bw"`    // bytes/s between nodes
	IntraLat float64 `json:"intra_lat_s"` // seconds per message inside a node
	InterLat float64 `json:"inter_lat_s"` // seconds per message between nodes
	// The device's link to its host, for pricing a step's driver calls
	// (profile.DeviceCallsTime); zero: HostLink's assumptions.
	HostBW     float64 `json:"host_bw,omitempty"`     // bytes/s of copies between pinned host memory and the device
	PageableBW float64 `json:"pageable_bw,omitempty"` // bytes/s of copies from or to pageable host memory, waited for
	SyncS      float64 `json:"sync_s,omitempty"`      // seconds a host wait for the device costs beyond the work it waits for
	// HostMemBW is the host's memory bandwidth for an optimizer step on its
	// cores (a stage whose state lives in host memory: StateHost); zero:
	// HostStepBW's assumption.
	HostMemBW float64 `json:"host_mem_bw,omitempty"`
	// What the run itself pays, as graphpipe profile measures it on the
	// device it runs on (links.go); zero or absent: not measured, and the
	// cost model prices links from IntraLat/IntraBW/InterLat/InterBW and
	// nothing per message, per iteration or per shared core, as before.
	RunCosts
}

// Host-link assumptions where a profile gives none (docs/planner.md): a
// PCIe 4.0 x16 link's practical pinned rate; pageable copies at the rate
// measured on an H100 host (bench/gpu/results/2026-11-25-h100: 1.76 GB of
// parameters uploaded tensor by tensor took 0.26 s more than the forward's
// prediction); a stream synchronisation's round trip.
const (
	DefaultHostBW     = 25e9
	DefaultPageableBW = 7e9
	DefaultSyncS      = 10e-6
)

// DefaultHostMemBW is the host memory bandwidth an optimizer step on a GPU
// host's cores is priced at where a profile gives none: a third of what a
// two-socket DDR5 server streams (about 300 GB/s), for an update's passes
// over state far larger than its caches, split over the cores.
const DefaultHostMemBW = 100e9

// HostStepBW is the bandwidth an optimizer step on d's host reads and
// writes its state at: the profile's host_mem_bw; else, on a CPU, its own
// memory's (the host is the device); else DefaultHostMemBW.
func (d Device) HostStepBW() float64 {
	switch {
	case d.HostMemBW > 0:
		return d.HostMemBW
	case d.IsCPU():
		return d.MemBW
	}
	return DefaultHostMemBW
}

// HostLink is d's host link: its own numbers, or the defaults above.
func (d Device) HostLink() (hostBW, pageableBW, syncS float64) {
	hostBW, pageableBW, syncS = d.HostBW, d.PageableBW, d.SyncS
	if hostBW <= 0 {
		hostBW = DefaultHostBW
	}
	if pageableBW <= 0 {
		pageableBW = DefaultPageableBW
	}
	if syncS <= 0 {
		syncS = DefaultSyncS
	}
	return hostBW, pageableBW, syncS
}

// Profiles are the built-in devices, by name.
var Profiles = map[string]Device{
	"v100": {Name: "v100", PeakFLOPs: 15.7e12, MaxEff: 0.81, HalfWork: 2e8, MemBW: 900e9, Memory: 16e9,
		Launch: 10e-6, IntraBW: 50e9, InterBW: 12.5e9, IntraLat: 10e-6, InterLat: 20e-6},
	"a100": {Name: "a100", PeakFLOPs: 19.5e12, Rates: Rates{TF32: 156e12, BF16: 312e12}, MaxEff: 0.81, HalfWork: 3e8, MemBW: 2.0e12, Memory: 80e9,
		Launch: 8e-6, IntraBW: 300e9, InterBW: 25e9, IntraLat: 8e-6, InterLat: 15e-6},
	"h100": {Name: "h100", PeakFLOPs: 67e12, Rates: Rates{TF32: 495e12, BF16: 989e12}, MaxEff: 0.81, HalfWork: 1e9, MemBW: 3.0e12, Memory: 80e9,
		Launch: 6e-6, IntraBW: 450e9, InterBW: 50e9, IntraLat: 6e-6, InterLat: 12e-6},
	// the CPU emulator of the CUDA kernels computes every precision on the
	// host's float32 units: at the fp32 rate
	"cpu": {Name: "cpu", PeakFLOPs: 16e9, Rates: Rates{TF32: 16e9, BF16: 16e9}, MaxEff: 1, HalfWork: 2e6, MemBW: 10.7e9, Memory: 8e9,
		Launch: 2e-6, IntraBW: 0.8e9, InterBW: 0.8e9, IntraLat: 100e-6, InterLat: 100e-6},
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	var out []string
	for n := range Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupDevice returns a built-in profile.
func LookupDevice(name string) (Device, error) {
	d, ok := Profiles[strings.ToLower(name)]
	if !ok {
		return Device{}, fmt.Errorf("unknown device %q (known: %s; or a profile file)", name, strings.Join(ProfileNames(), ", "))
	}
	return d, nil
}

// DeviceFormat is the version tag of a profile file. graphpipe profile
// writes it; a file without one is read as this version.
const DeviceFormat = "graphpipe/device@1"

// EncodeDevice writes d as a profile file, tagged with DeviceFormat first.
func EncodeDevice(d Device) []byte {
	b, _ := json.MarshalIndent(d, "", "  ")
	return append(append([]byte("{\n  \"format\": \""+DeviceFormat+"\","), b[1:]...), '\n')
}

// UnmarshalJSON reads a profile strictly (unknown fields are refused) and
// takes memory, a count of bytes, in any JSON number form that is a whole
// number, 1e10 or 16e9 as well as 10000000000.
func (d *Device) UnmarshalJSON(data []byte) error {
	type plain Device // without this method
	var v struct {
		plain
		Memory json.RawMessage `json:"memory"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*d = Device(v.plain)
	d.Memory = 0
	if len(v.Memory) == 0 || string(v.Memory) == "null" {
		return nil
	}
	var n json.Number
	if v.Memory[0] == '"' || json.Unmarshal(v.Memory, &n) != nil {
		return fmt.Errorf("memory: %s is not a number of bytes", v.Memory)
	}
	if i, err := n.Int64(); err == nil {
		d.Memory = i
		return nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || !(math.Abs(f) < 1<<63) {
		return fmt.Errorf("memory: %s is not a whole number of bytes", n)
	}
	d.Memory = int64(f)
	return nil
}

// ParseDevice reads a custom profile: a JSON object with Device's fields, all
// of them positive, and the format tag, if any, DeviceFormat. Unknown fields
// are refused.
func ParseDevice(data []byte) (Device, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) == nil {
		if tag, ok := fields["format"]; ok {
			var format string
			if json.Unmarshal(tag, &format) != nil || format != DeviceFormat {
				return Device{}, fmt.Errorf("device profile: format: is %s, want %q", tag, DeviceFormat)
			}
			delete(fields, "format")
			data, _ = json.Marshal(fields)
		}
	}
	var d Device
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Device{}, fmt.Errorf("device profile: %v", err)
	}
	return d, d.Validate()
}

// Validate refuses a profile with a missing number, or one outside the
// bounds that keep the cost model's sums finite (bounds.go): rates in
// [MinRate, MaxRate], times in [0, MaxSeconds], max_eff in [MinMaxEff, 1].
func (d Device) Validate() error {
	if d.Name == "" {
		return fmt.Errorf("device profile: name: required")
	}
	err := firstErr(
		rate("peak_flops", d.PeakFLOPs), within("max_eff", d.MaxEff, MinMaxEff, 1),
		within("half_work", d.HalfWork, math.SmallestNonzeroFloat64, MaxHalfWork), rate("mem_bw", d.MemBW),
		rate("intra_bw", d.IntraBW), rate("inter_bw", d.InterBW),
		seconds("launch_s", d.Launch), seconds("intra_lat_s", d.IntraLat), seconds("inter_lat_s", d.InterLat),
		optionalRate("host_bw", d.HostBW), optionalRate("pageable_bw", d.PageableBW), seconds("sync_s", d.SyncS),
		optionalRate("host_mem_bw", d.HostMemBW), d.RunCosts.validate())
	if err == nil && d.Memory <= 0 {
		err = fmt.Errorf("memory: must be a positive number of bytes, got %d", d.Memory)
	}
	if err != nil {
		return fmt.Errorf("device profile %q: %v", d.Name, err)
	}
	return d.validateRates()
}

// Efficiency is the fraction of peak a kernel of work FLOPs reaches.
func (d Device) Efficiency(work float64) float64 { return d.MaxEff * work / (work + d.HalfWork) }
