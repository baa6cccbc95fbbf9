package chart

import (
	"strings"
	"testing"
)

func planned() Gantt {
	return Gantt{Title: "sweep planned: 30 s", Devices: 8, Bars: []Bar{
		{"mmt-lr3", 0, 4, 0, 20}, {"dlrm-a", 4, 2, 0, 12}, {"dlrm-b", 6, 2, 0, 15}, {"candle", 4, 4, 15, 30}}}
}

// TestGanttCarriesItsWords: a Gantt chart has its title, axis titles, the
// devices' labels and every job's name; drawn with another, both titles.
func TestGanttCarriesItsWords(t *testing.T) {
	ran := planned()
	ran.Title = "sweep as it ran: 33 s"
	ran.Bars[3].Start, ran.Bars[3].End = 16, 33
	for _, f := range []Format{SVG, PNG} {
		data, err := Gantts(f, planned(), ran)
		if err != nil {
			t.Fatal(err)
		}
		in, err := Inspect(data)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"Title: sweep planned: 30 s / sweep as it ran: 33 s", "Description: x axis: time (s); y axis: device"}
		if f == SVG {
			want = []string{"sweep planned: 30 s", "sweep as it ran: 33 s", SecondsAxis, DeviceAxis, "mmt-lr3", "dlrm-a", "dlrm-b", "candle", "0", "7"}
		}
		for _, w := range want {
			if !in.Has(w) {
				t.Errorf("%s lacks %q: %q", f, w, in.Texts)
			}
		}
	}
}

func TestGanttRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Gantt)
		says string
	}{
		{"no devices", func(g *Gantt) { g.Devices = 0 }, "no devices"},
		{"past the devices", func(g *Gantt) { g.Bars[0].Devices = 9 }, `bar "mmt-lr3"`},
		{"ends before it starts", func(g *Gantt) { g.Bars[1].End = -1 }, `bar "dlrm-a"`},
	} {
		g := planned()
		c.edit(&g)
		if _, err := Gantts(SVG, g); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := Gantts(SVG); err == nil {
		t.Error("no chart drawn without an error")
	}
}
