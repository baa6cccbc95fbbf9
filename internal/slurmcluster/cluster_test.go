package slurmcluster

import (
	"strings"
	"testing"
)

// TestClusterRunsTasks: the cluster runs srun's tasks, each told its rank
// of the step, and a batch job to its end; nothing is left queued.
func TestClusterRunsTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Slurm cluster of its own; make check runs it")
	}
	c := Start(t)
	out, err := c.Command("srun", "--ntasks=2", "--overcommit", "sh", "-c", "echo $SLURM_PROCID/$SLURM_NTASKS").CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v\n%s\n%s", err, out, c.Logs())
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 || !strings.Contains(string(out), "0/2") || !strings.Contains(string(out), "1/2") {
		t.Fatalf("srun printed %q", out)
	}
	dir := t.TempDir()
	out, err = c.Command("sbatch", "--wait", "--chdir", dir, "--output", dir+"/job.log", "--wrap", "srun echo batch $SLURM_JOB_ID").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s\n%s", err, out, c.Logs())
	}
	if jobs := c.Jobs(); jobs != "" {
		t.Fatalf("squeue still lists:\n%s", jobs)
	}
}
