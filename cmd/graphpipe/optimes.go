package main

import (
	"fmt"
	"os"
	goruntime "runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// profileOps is graphpipe profile --model: every op of the model timed on
// this machine's CPU backend or on a GPU (device cuda or cuda-emulator),
// written as op times.
func profileOps(cmd *cobra.Command, path, device string, gpu int, batch int64, quick bool, out string) error {
	g, err := loadModel(path, cmd.InOrStdin())
	if err != nil {
		return err
	}
	if err := computable(g, path); err != nil {
		return err
	}
	if batch == 0 {
		batch = g.BatchSize()
	}
	if batch < 1 || batch > 1<<20 {
		return usagef("--batch: must be between 1 and %d, got %d", 1<<20, batch)
	}
	var sizes []int
	for m := int64(1); m <= batch; m *= 2 {
		sizes = append(sizes, int(m))
	}
	if last := sizes[len(sizes)-1]; int64(last) != batch {
		sizes = append(sizes, int(batch))
	}
	var dev *cuda.Device
	where, have := "cpu", (cpuMeter{}).memory()
	switch device {
	case "cpu":
	case "cuda", "cuda-emulator":
		// every call below comes from this goroutine: keep it on the
		// thread where the device's context is current
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		f := deviceFlags{backend: device, gpu: gpu}
		d, err := f.open()
		if err == nil {
			err = d.Bind()
		}
		if err != nil {
			return err
		}
		defer d.Close()
		dev, where = d, d.Name
		if !d.Emulated {
			have = int64(d.Memory)
		}
	default:
		return usagef("--device: cannot time ops on %q (known: cpu, cuda, cuda-emulator)", device)
	}
	// the whole model runs at the largest size: its parameters, their
	// gradients, and every output and stash of a micro-batch
	tot := g.Total()
	need := 8*tot.Params + int64(sizes[len(sizes)-1])*(tot.OutBytes+tot.StashBytes)
	if need > have/2 {
		return usagef("--batch: timing the ops at micro-batch %d needs about %.3g GB, over half of the %.3g GB of %s; pass a smaller --batch (times beyond it are extrapolated)",
			sizes[len(sizes)-1], float64(need)/1e9, float64(have)/1e9, where)
	}
	minTime := 200 * time.Millisecond // per size
	if quick {
		minTime = 20 * time.Millisecond
	}
	log := cmd.ErrOrStderr()
	start := time.Now()
	last := start
	if dev == nil {
		host, _ := os.Hostname()
		where = fmt.Sprintf("cpu (%s)", host)
	}
	t, err := runtime.MeasureOpTimes(g, sizes, minTime, dev, where+", stage executor", func(m int) {
		fmt.Fprintf(log, "timed every op at micro-batch %d (%.1f s)\n", m, time.Since(last).Seconds())
		last = time.Now()
	})
	if err != nil {
		return err
	}
	data, err := t.Encode()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "timed %d ops at micro-batches %v in %.1f s\n", g.NumOps(), sizes, time.Since(start).Seconds())
	if out == "" {
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	if err := writeFile("-o", out, data); err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote %s\n", out)
	return nil
}
