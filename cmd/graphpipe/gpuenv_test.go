package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestGPUVariablesOnlyForCUDA: a task environment whose GPU variables do
// not fit it (CUDA_VISIBLE_DEVICES lists two GPUs for local rank 2; a
// SLURM_STEP_GPUS entry that is no index) fails only a --backend cuda
// run, naming the variable; a cpu or emulator run reads its tasks without
// them (it failed with exit 2).
func TestGPUVariablesOnlyForCUDA(t *testing.T) {
	for _, tc := range []struct {
		name, bad string
		env       map[string]string
	}{
		{"torchrun", "CUDA_VISIBLE_DEVICES", map[string]string{"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "0,1"}},
		{"slurm", "SLURM_STEP_GPUS", map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
			"SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NODELIST": "localhost", "SLURM_NNODES": "1",
			"SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "7", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_STEP_GPUS": "0,x"}},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		for _, backend := range []string{"cpu", "cuda-emulator", "cuda"} {
			f := &runFlags{device: deviceFlags{backend: backend}}
			cmd := &cobra.Command{}
			cmd.Flags().String("workers", "", "")
			err := f.detectTasks(cmd)
			switch {
			case backend == "cuda" && (err == nil || !strings.HasPrefix(err.Error(), tc.bad+": ")):
				t.Errorf("%s, --backend cuda: %v, want an error naming %s", tc.name, err, tc.bad)
			case backend != "cuda" && (err != nil || f.tasks == nil):
				t.Errorf("%s, --backend %s: %v (tasks %v), want the tasks read without the GPU variables", tc.name, backend, err, f.tasks)
			}
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}
