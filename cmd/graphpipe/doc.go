// Command graphpipe plans and trains deep networks with graph pipeline
// parallelism. This package is the command line only: flags in, calls out.
//
// Exit status: 0 on success; 1 when the work itself fails (the search finds no
// plan that fits, a run dies); 2 for usage errors and bad input (flags, model
// files, a model that no plan can fit on the devices given, which search
// refuses before searching), with one line per problem on stderr naming the
// thing at fault.
package main
