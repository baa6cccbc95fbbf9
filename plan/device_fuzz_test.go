package plan

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// FuzzParseDevice: a profile file (the seeds: the built-in profiles and the
// files of testdata/devices) either is refused with an error or round-trips
// through JSON unchanged and prices the worst op finitely; reading it allocates no more than its size calls
// for. (search's FuzzSearchDevice plans a small model with each.)
func FuzzParseDevice(f *testing.F) {
	for _, name := range ProfileNames() {
		data, _ := json.Marshal(Profiles[name])
		f.Add(data)
	}
	measured := Profiles["cpu"]
	measured.RunCosts = RunCosts{NATSLat: 1e-4, NATSBW: 3e8, HostCores: 2, CoreSlowdown: NewSlowdowns(1, 1.1, 1.5), NATSJoinS: NewJoinLatencies(1e-4, 1e-4, 1.4e-4)}
	if data, err := json.Marshal(measured); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"name":"x","peak_flops":1e308,"max_eff":1,"half_work":1e-300,"mem_bw":1e-300,"memory":1,"intra_bw":1,"inter_bw":1}`))
	for _, o := range overflowing { // finite, and overflowing before the bounds
		f.Add([]byte(profileJSON(o.field, o.v)))
	}
	addFiles(f, "testdata/devices/*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Device
		var err error
		if n := allocated(func() { d, err = ParseDevice(data) }); n > decodeBudget(len(data)) {
			t.Fatalf("%d bytes allocated for a profile of %d", n, len(data))
		}
		if err != nil {
			return
		}
		if w := worstSeconds(d); math.IsInf(w, 0) || math.IsNaN(w) {
			t.Fatalf("an accepted profile prices the worst op at %g s", w)
		}
		again, _ := json.Marshal(d)
		d2, err := ParseDevice(again)
		if err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("round trip: %v, %+v vs %+v", err, d, d2)
		}
	})
}
