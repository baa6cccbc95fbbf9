package main

import "os"

// gpuVars are the variables a workload manager gives a task its GPUs by:
// CUDA_VISIBLE_DEVICES, and Slurm's SLURM_STEP_GPUS where it is unset.
var gpuVars = map[string]bool{"CUDA_VISIBLE_DEVICES": true, "SLURM_STEP_GPUS": true}

// taskGetenv is os.Getenv as a run (or a sweep) on backend reads its task environment: with a
// backend other than cuda the run uses no GPU, so the variables that give
// a task its GPU are not read. A CPU run in an allocation whose GPU
// variables are wrong, or list fewer GPUs than it has tasks on a node,
// failed on them (exit 2 naming the variable) though it would never use
// one; with --backend cuda they are checked as before.
func taskGetenv(backend string) func(name string) string {
	return func(name string) string {
		if gpuVars[name] && backend != "cuda" {
			return ""
		}
		return os.Getenv(name)
	}
}
