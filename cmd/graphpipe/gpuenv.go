package main

import "os"

// gpuVars are the variables a workload manager gives a task its GPUs by:
// CUDA_VISIBLE_DEVICES, and Slurm's SLURM_STEP_GPUS where it is unset.
var gpuVars = map[string]bool{"CUDA_VISIBLE_DEVICES": true, "SLURM_STEP_GPUS": true}

// taskGetenv is os.Getenv as a run reads its task environment: with a
// backend other than cuda the run uses no GPU, so the variables that give
// a task its GPU are not read. A CPU run in an allocation whose GPU
// variables are wrong, or list fewer GPUs than it has tasks on a node,
// failed on them (exit 2 naming the variable) though it would never use
// one; with --backend cuda they are checked as before.
func (f *runFlags) taskGetenv(name string) string {
	if gpuVars[name] && f.device.backend != "cuda" {
		return ""
	}
	return os.Getenv(name)
}
