// Command graphpipe plans and trains deep networks with graph pipeline
// parallelism. This package is the command line only: flags in, calls out.
//
// Exit status, the README's table (TestExitCodes holds every command to it):
// 0 done; 1 the environment or a fault (the search finds no plan that fits,
// a run dies, a server that does not answer); 2 bad input or flags, one line
// per problem on stderr naming the thing at fault (a model that no plan can
// fit on the devices given, which search refuses before searching); 3
// training diverged; 128 + N stopped by signal N.
//
// graphpipe run in the tasks an environment started (srun's, torchrun's, a
// Kubernetes Indexed Job's; tasks.go): every task runs the same command;
// task 0 plans, serves and coordinates, the others join
// (docs/clusters.md). A wrong or partial environment is exit 2 naming the
// variable.
package main
