// Package supervise runs a training run to its end: a Supervisor drives the
// run's generations through a Launcher (worker processes of this host,
// workers started elsewhere, agents taken from a pool, the tasks an
// environment started: Slurm's srun, torchrun, a Kubernetes Indexed Job),
// restarts a failed
// generation from the last checkpoint, re-plans onto the devices left when
// elastic, and writes the run's outputs (trace, timeline, profile, dump)
// once it is over. It plans nothing: an elastic run's caller supplies the
// planner (Elastic.Replan).
//
// A Job is a runtime.Job (what the coordinator and every worker share, and
// the coordinator's Config) and Local: the restarts and the output files,
// which only the supervisor uses.
//
// The caller's duties:
//
//  1. Build the Job and its Launcher; Supervisor.Run checks the Job once
//     (Job.Validate: a *runtime.JobError naming the field, runtime.Job's
//     promoted, "Local.Restarts" for Local's).
//  2. Give the Supervisor the coordinator's transport, over which every
//     worker, or every agent of the pool, reaches it; give a PoolLauncher the
//     run's Timings (PoolConfig), which its agents are judged live by.
//  3. Read the Result (the last generation's, with the Recoveries), or the
//     typed error: runtime's, PlacementError (a pool that cannot honour the
//     plan's nodes), DeviceError (a pool whose agents are of another device
//     than the plan's), OutputError (an output that could not be written).
//
// What the supervisor and its launchers do:
//
//  1. A Launcher starts each generation's workers, one per Slot of the
//     generation's plan, each joining generation Gen of the run; it reports
//     a worker lost mid-generation through Generation.Lost when it can see
//     one (a process that exits, an agent that falls silent), ends them on
//     Stop, and gives back what it holds on Close. Every implementation runs
//     one contract suite (launcher_contract_test.go).
//  2. A generation that fails is followed by another, from the newest whole
//     checkpoint (or the start, or --init's values), up to Local.Restarts of
//     them; a failure no restart can mend (the data refused, a divergence, a
//     stop asked for, a placement the pool cannot honour) ends the run at
//     once (Final).
//  3. A pool's agents (Agent) advertise themselves (host, device, pid, who
//     holds them) every heartbeat; a PoolLauncher offers slots only to
//     agents heard within the heartbeat timeout, counts an agent only once
//     it confirms within the confirmation timeout (one that does not is
//     told to stop the generation and released, so that a late offer
//     leaves it free, and its coordinator takes each worker id's hello
//     from the agent placed there only: Generation.Agents), takes only agents of the
//     plan's device (the profile and memory they advertise against each
//     slot's: plan.SameDevice; enough agents, too few of them of the
//     plan's device, are refused: DeviceError), puts each plan node's
//     workers on agents of one host (or refuses: PlacementError), fails the
//     generation when a taken agent falls silent, and releases its agents at
//     the end. An agent held by a coordinator that falls silent goes back
//     to the pool by itself.
//  4. With Supervisor.Elastic and a launcher that counts its devices
//     (Capacity: a pool), a restart whose spare does not come within
//     ReplaceWait runs a plan for the devices left (Elastic.Replan),
//     resumed from the last checkpoint; a generation on fewer devices than
//     the first plan stops at its next checkpoint once more are there, and
//     grows back. Every recovery is timed per phase (Recovery, in
//     Result.Recoveries) from the lost worker's last sign of life
//     (runtime.SilentError) to training again.
//  5. Once the run is over, the outputs Local.Outputs names are written,
//     each atomically; one that cannot be is an *OutputError naming it.
//  6. Where an environment started every task of a run with the same
//     command, DetectEnv reads which task this is (an *EnvError names the
//     variable of a wrong or partial environment; ExpandHostlist reads
//     Slurm's node lists). Task 0 first removes the rendezvous file an
//     earlier launch of the same key left (ClearRendezvous), then writes
//     its own (its server's URL, a generated token, the run, mode 0600);
//     the other tasks read it (RendezvousWait), refusing a file task 0
//     did not write (*UntrustedError: a FIFO, another user's, one others
//     may read) and waiting past one whose task 0 is gone. Task 0
//     coordinates with a
//     TaskLauncher, which refuses a plan the tasks cannot run
//     (CheckPlanOnTasks), orders every other task (a Task) to join each
//     generation as the plan device its node and local rank make
//     (PlanDevice), starts a worker process for task 0's own device,
//     replaces a task lost for good with a worker process within the
//     allocation (srun) or waits for the environment to start it again,
//     and, on End, tells the tasks the run is over, and whether it failed
//     (the tasks then exit non-zero), and waits for them to say they
//     leave. A task of another launch (another model or plan, another
//     number of tasks, or one started after the run began that claims a
//     live task's rank) is refused (a *RefusedError ends it) and the run
//     goes on; two live tasks of one launch claiming one rank are a final
//     *EnvError.
//  7. A SweepRunner runs many jobs on one cluster as a sweep.Progress
//     says: each in a goroutine of its own (the caller's Job, a run of its
//     own on its slot's devices) as soon as its devices free up, its end or
//     failure told back, the jobs not started re-planned when a measured
//     time drifts; a failed job skips the jobs that wait for it
//     (*SweepFailedError), and the rest run on.
//  8. A sweep whose tasks an environment started runs over a pool named
//     after the launch: every task but 0 serves as an agent of it
//     (SweepTask) on task 0's server, found through the rendezvous file
//     of step 6; task 0 (SweepTasks: a TaskLauncher's adverts, refusals
//     and join timeout) waits for them all, beats for them, says a task
//     lost mid-sweep once (a lost agent, which the pool's runs restart
//     without), and on End tells them the sweep is over, and whether it
//     failed, as step 6 tells a run's tasks.
package supervise
