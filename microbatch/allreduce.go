package microbatch

// AllReduce is no action of a list: it is the kind of a measured span in
// which a stage's replicas all-reduced a bucket of its gradients (MB: the
// bucket) while its last weight pass went on (the runtime's overlapped
// all-reduce). A timeline holds it beside the stage's compute, not in it
// (Event.Compute); a trace draws it on a thread of its own per stage.
const AllReduce Kind = 'A'
