package microbatch_test

import (
	"fmt"

	"github.com/graphpipe/graphpipe/microbatch"
)

// Two branches (stages 0 and 1) feed a head (stage 2); 1F1B over four
// micro-batches, the backward twice the forward, transfers a tenth of it.
func ExampleSimulate() {
	p := microbatch.Pipeline{Stages: 3, Edges: [][2]int{{0, 2}, {1, 2}}, MicroBatches: 4}
	sch, err := microbatch.New("1f1b", p)
	if err != nil {
		fmt.Println(err)
		return
	}
	t := microbatch.Timing{
		F: []float64{1, 1, 1}, B: []float64{2, 2, 2}, W: []float64{0, 0, 0},
		Act: []float64{0.1, 0.1}, Grad: []float64{0.1, 0.1},
	}
	res, err := microbatch.Simulate(sch, t)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("iteration %.1f s, bubble %.0f%%, in flight %v\n", res.Iteration, 100*res.Bubble, res.InFlight)
	grid, _ := microbatch.Grid(sch)
	fmt.Print(grid)
	// Output:
	// iteration 15.4 s, bubble 22%, in flight [2 2 1]
	// # 1f1b, 3 stages, 4 micro-batches; cell = <stage><F|B|W><micro-batch>
	// step s0  s1  s2
	// 0    0F0 1F0 .
	// 1    0F1 1F1 2F0
	// 2    .   .   2B0
	// 3    0B0 1B0 2F1
	// 4    0F2 1F2 2B1
	// 5    0B1 1B1 2F2
	// 6    0F3 1F3 2B2
	// 7    0B2 1B2 2F3
	// 8    .   .   2B3
	// 9    0B3 1B3 .
}
