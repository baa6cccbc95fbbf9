package main

import (
	"encoding/json"
	"fmt"
	"io"
	goruntime "runtime"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func newProfileCmd() *cobra.Command {
	var device, out, model string
	var gpu int
	var quick, asJSON bool
	var batch int64
	cmd := &cobra.Command{
		Use:   "profile [--device cpu|cuda] [--model MODEL] [-o FILE]",
		Short: "Measure a device profile (GEMM rate and efficiency, launch cost, memory bandwidth) for the planner",
		Long: `Measure this machine's CPU, or a GPU, and write a device profile that
'graphpipe search --device FILE' reads. GEMMs of growing size fit the cost
model's compute term (the rate large calls approach, and the work at which a
call reaches half of it); a chain of tiny ops trained through the stage
executor gives the fixed cost of an op call (the bare kernel launch is
reported beside it); a large copy gives memory bandwidth. Then what a run
pays beside its ops, with worker processes started for it, as a run's are:
messages between two workers over NATS (their latency and bandwidth, and
what a message costs its sender and its receiver), the ring all-reduce, the
coordinator's go (when it reaches each worker) and the reports (an
iteration's fixed costs), and on the CPU the
slowdown of an op with k workers sharing the cores; on a GPU, its
device-to-device copy (the path workers on one host use). On the CPU the
NATS path is the links between workers; links between GPUs cannot be
measured from one device: they are copied from the nearest built-in
profile, which the output names. The machine should be quiet: the costs
hold for the load they were measured under.

With --model, time the model's own ops instead, as the paper's planner
does: the whole model runs forward, backward for its inputs and backward for
its weights through the stage executor, on this CPU or on the --device GPU
(synchronised after every op), at every power-of-two micro-batch up to the
batch, on the model's synthetic data, and each op keeps its mean share.
'graphpipe search --op-times FILE' then prices every op from these times;
links, all-reduce, the optimizer step and memory still come from its
--device. (On a GPU this path has run on the kernels' CPU emulator only.)`,
		Example: "  graphpipe profile --device cuda -o h100.json\n  graphpipe search mmt.json --devices 8 --device h100.json\n" +
			"  graphpipe profile --model mmt-small.json -o mmt-small.optimes.json\n  graphpipe search mmt-small.json --devices 2 --device cpu --op-times mmt-small.optimes.json",
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			if model != "" {
				if asJSON {
					return usagef("--json: not with --model (op times are JSON already)")
				}
				return profileOps(cmd, model, device, gpu, batch, quick, out)
			}
			if cmd.Flags().Changed("batch") {
				return usagef("--batch: only with --model")
			}
			res, err := profileDevice(device, gpu, quick, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			data := plan.EncodeDevice(res.Device)
			if out != "" {
				if err := writeFile("-o", out, data); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", out)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(data)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&device, "device", "cpu", "what to measure: cpu, cuda or cuda-emulator (the emulator's figures say nothing about a GPU; it exercises the code path)")
	cmd.Flags().IntVar(&gpu, "gpu", 0, "with --device cuda: the GPU ordinal")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the profile to `FILE` (default: print it)")
	cmd.Flags().BoolVar(&quick, "quick", false, "fewer and smaller GEMMs (seconds, not a minute); with --model, 20 ms of timing per micro-batch size instead of 200")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the profile and every measurement as one JSON object")
	cmd.Flags().StringVar(&model, "model", "", "instead of the device, time every op of the model in `FILE` (forward, input and weight gradient, at every power-of-two micro-batch up to the batch) and write op times for 'graphpipe search --op-times'")
	cmd.Flags().Int64Var(&batch, "batch", 0, "with --model: the largest micro-batch timed (default: the model's batch_size)")
	return cmd
}

// profileDevice measures the --device (profile.Measure) and returns the
// profile with its measurements under profileFormat.
func profileDevice(device string, gpu int, quick bool, log io.Writer) (*profile.Result, error) {
	m := profile.CPUMeter()
	switch device {
	case "cpu":
	case "cuda", "cuda-emulator":
		d, release, err := openGPU(device, gpu)
		if err != nil {
			return nil, err
		}
		defer release()
		m = profile.GPUMeter(d)
	default:
		return nil, usagef("--device: cannot measure %q (known: cpu, cuda, cuda-emulator)", device)
	}
	res, err := profile.Measure(m, quick, log)
	if err != nil {
		return nil, err
	}
	res.Format = profileFormat
	return res, nil
}

// openGPU opens the --device GPU (cuda or cuda-emulator) and binds it to
// this goroutine's thread, where every call on it must come from; release
// closes it and frees the thread.
func openGPU(device string, gpu int) (d *cuda.Device, release func(), err error) {
	goruntime.LockOSThread()
	f := deviceFlags{backend: device, gpu: gpu}
	d, err = f.open()
	if err == nil {
		err = d.Bind()
	}
	if err != nil {
		goruntime.UnlockOSThread()
		return nil, nil, err
	}
	return d, func() { d.Close(); goruntime.UnlockOSThread() }, nil
}
