package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// profileOps is graphpipe profile --model: every op of the model timed on
// this machine's CPU backend or on a GPU (device cuda or cuda-emulator),
// written as op times (profile.MeasureOpTimes).
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
	sizes := profile.MicroBatches(batch)
	var dev *cuda.Device
	where := "cpu"
	switch device {
	case "cpu":
	case "cuda", "cuda-emulator":
		d, release, err := openGPU(device, gpu)
		if err != nil {
			return err
		}
		defer release()
		dev, where = d, d.Name
	default:
		return usagef("--device: cannot time ops on %q (known: cpu, cuda, cuda-emulator)", device)
	}
	largest := sizes[len(sizes)-1]
	if need, have := profile.OpTimesNeed(g, largest), profile.Memory(dev); need > have/2 {
		return usagef("--batch: timing the ops at micro-batch %d needs about %.3g GB, over half of the %.3g GB of %s; pass a smaller --batch (times beyond it are extrapolated)",
			largest, float64(need)/1e9, float64(have)/1e9, where)
	}
	minTime := 200 * time.Millisecond // per size
	if quick {
		minTime = 20 * time.Millisecond
	}
	log := cmd.ErrOrStderr()
	start := time.Now()
	last := start
	t, err := profile.MeasureOpTimes(g, sizes, minTime, dev, profile.Where(dev)+", stage executor", func(m int) {
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
