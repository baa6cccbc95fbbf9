// Package slurmcluster runs a real one-node Slurm cluster for tests:
// Debian's slurm-wlm (slurmctld, slurmd, sbatch, srun, scontrol, squeue,
// scancel) and munge, with a configuration, a munge key, state and spool
// directories and ports of the test's own, so that it touches nothing of a
// Slurm the machine may run.
//
// A test's duties, in order:
//
//  1. Start(t) writes the configuration into a temporary directory
//     (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, one node of
//     the machine's CPUs named localhost, which resolves wherever the tests
//     run, the controller named after the host, a requeued job eligible
//     again after 5 s, a finished one kept 4 s, which keeps sbatch --wait
//     polling every 2 s), starts munged, slurmctld and slurmd and returns once
//     the node is idle. It skips the test when a binary is missing, or fails
//     it when $GRAPHPIPE_REQUIRE_SLURM is 1 (.ci/run installs slurm-wlm and
//     munge and sets it, so CI never skips); it fails it when the daemons do
//     not come up, with their logs.
//  2. Command(name, args...) is a Slurm client command (sbatch, squeue,
//     scancel, scontrol, srun) bound to the cluster (SLURM_CONF); Env() is
//     that binding, for commands the test starts otherwise.
//  3. Nothing else: when the test ends, every job is cancelled, the
//     daemons stop, and Leftovers (called by the teardown, failing the test)
//     finds any process still running under the cluster's configuration.
package slurmcluster
