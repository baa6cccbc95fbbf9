package microbatch

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestKindOf: every name of Names has its description, Splits and Known
// agree with it, and an unknown name is an UnknownScheduleError that lists
// the known ones.
func TestKindOf(t *testing.T) {
	t.Parallel()
	want := map[string]ScheduleKind{
		"1f1b":       {Name: "1f1b", Tunable: true},
		"1f1b-depth": {Name: "1f1b-depth"},
		"zb":         {Name: "zb", Split: true, Tunable: true, Timed: true},
		"gpipe":      {Name: "gpipe", AllForwardsFirst: true},
		"2bw":        {Name: "2bw", Tunable: true, NoFlush: true},
	}
	if len(Names) != len(want) || !reflect.DeepEqual(Names, kindNames()) {
		t.Fatalf("Names %v, the table's %v", Names, kindNames())
	}
	for i, k := range Kinds() {
		if k.Name != Names[i] {
			t.Errorf("Kinds()[%d] is %q, Names[%d] %q", i, k.Name, i, Names[i])
		}
	}
	for _, name := range Names {
		k, err := KindOf(name)
		if err != nil || k != want[name] {
			t.Errorf("KindOf(%q) = %+v, %v; want %+v", name, k, err, want[name])
		}
		if Splits(name) != k.Split || !Known(name) {
			t.Errorf("%s: Splits %v, Known %v; its kind %+v", name, Splits(name), Known(name), k)
		}
	}
	_, err := KindOf("pipedream")
	var unknown *UnknownScheduleError
	if !errors.As(err, &unknown) || unknown.Name != "pipedream" {
		t.Fatalf("KindOf(pipedream): %v, want an UnknownScheduleError naming it", err)
	}
	if got := err.Error(); got != `unknown schedule "pipedream" (known: 1f1b, 1f1b-depth, zb, gpipe, 2bw)` {
		t.Errorf("error %q", got)
	}
	if Known("pipedream") || Splits("pipedream") {
		t.Error("an unknown schedule is known or splits")
	}
	if _, err := New("pipedream", chain(2, 2)); !errors.As(err, &unknown) {
		t.Errorf("New(pipedream): %v, want an UnknownScheduleError", err)
	}
	if _, err := NewTimed("pipedream", chain(2, 2), Unit(chain(2, 2)), 0); !errors.As(err, &unknown) {
		t.Errorf("NewTimed(pipedream): %v, want an UnknownScheduleError", err)
	}
}

// TestKindBuildsByProperties: a schedule is built from its description's
// properties, never its name: a row that is not in the table (as a new
// schedule's would be) builds the lists of the known kind it resembles,
// untimed and timed, and Rewarmed builds what Warmed does.
func TestKindBuildsByProperties(t *testing.T) {
	t.Parallel()
	p := twoBranch(5)
	tm := Unit(p)
	tm.Act, tm.Grad = []float64{0.5, 0.25}, []float64{0.5, 0.25}
	for _, like := range Kinds() {
		novel := like
		novel.Name = "novel"
		for _, timed := range []bool{false, true} {
			build := func(k ScheduleKind) (*Schedule, error) {
				if timed {
					return k.NewTimed(p, tm, 0)
				}
				return k.New(p)
			}
			want, werr := build(like)
			got, gerr := build(novel)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("like %s, timed %v: errors %v and %v", like.Name, timed, werr, gerr)
			}
			if werr != nil {
				if !like.Timed || timed || !strings.Contains(gerr.Error(), "schedule novel is built from durations") {
					t.Fatalf("like %s, timed %v: %v", like.Name, timed, gerr)
				}
				continue
			}
			if !reflect.DeepEqual(got.Lists, want.Lists) || got.Split != like.Split || got.NoFlush != like.NoFlush {
				t.Errorf("like %s, timed %v: a row of the same properties builds other lists", like.Name, timed)
			}
			if err := Check(got, nil); err != nil {
				t.Errorf("like %s, timed %v: %v", like.Name, timed, err)
			}
		}
		depth, _ := p.Depth()
		more := append([]int(nil), depth...)
		more[0]++
		base, err := novel.Warmed(p, tm, depth)
		if !like.Tunable {
			if err == nil {
				t.Errorf("like %s: warm-up counts taken by a schedule that is not tunable", like.Name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		again, err := novel.Rewarmed(base, depth, more, tm)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := novel.Warmed(p, tm, more)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again.Lists, fresh.Lists) {
			t.Errorf("like %s: Rewarmed's lists differ from Warmed's", like.Name)
		}
	}
}
