package runtime

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// KillEnv is the environment variable a worker process's command reads its
// Config.KillPoints from, a test hook: "gen:worker:iteration:point[,…]"
// makes that worker of that generation exit with status 9 at that point of
// that iteration: after-send (its first send), before-step (between its
// last gradient and its optimizer step) or during-checkpoint (before it
// hands its state over); a point prefixed "hang-" makes it hang there
// instead.
const KillEnv = "GRAPHPIPE_TEST_KILL"

// killPoint is the point of points (KillEnv's format) at which worker of
// generation gen dies in iteration iter, "" for none.
func killPoint(points string, gen uint32, worker int32, iter int) string {
	for _, spec := range strings.Split(points, ",") {
		var g, w, n int
		var point string
		if c, _ := fmt.Sscanf(strings.ReplaceAll(spec, ":", " "), "%d %d %d %s", &g, &w, &n, &point); c == 4 &&
			uint32(g) == gen && int32(w) == worker && n == iter {
			return point
		}
	}
	return ""
}

// killHook is a worker's test hook (Config.KillPoints) in an iteration:
// the point it dies at, and the sends that find after-send's. Only the
// worker's goroutine uses it.
type killHook struct {
	point string // "" for none
	sends int    // sends so far this iteration
}

// begin starts an iteration: no sends yet.
func (k *killHook) begin() { k.sends = 0 }

// sent counts a send, and says whether it is the iteration's first.
func (k *killHook) sent() bool {
	k.sends++
	return k.sends == 1
}

// die exits the process if this iteration's kill point is point, or hangs
// (computing forever, as far as anyone can tell) if it is "hang-"+point.
func (w *Worker) die(point string) {
	kill := w.kill.point
	if kill == point || kill == "hang-"+point {
		w.links.out.drain(context.Background()) // what was sent before the point is out
	}
	if kill == "hang-"+point {
		fmt.Fprintf(os.Stderr, "test hook: worker %d hangs %s\n", w.ID, point)
		w.watch.busy("a hang the test hook asked for at " + point)
		select {}
	}
	if kill == point {
		fmt.Fprintf(os.Stderr, "test hook: worker %d exits %s\n", w.ID, point)
		os.Exit(9)
	}
}
