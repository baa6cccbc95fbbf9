package main

// The format tags of the JSON documents the commands print, each at the top
// of its object as the model and plan files carry theirs; a reader checks the
// tag before it trusts the fields. docs/json-outputs.md lists their fields.
const (
	inspectFormat = "graphpipe/inspect@1" // inspect --json
	searchFormat  = "graphpipe/search@1"  // search --json: a plan's summary
	simFormat     = "graphpipe/sim@1"     // sim --json
	trainFormat   = "graphpipe/train@1"   // train --json
	evalFormat    = "graphpipe/eval@1"    // eval --json
	runFormat     = "graphpipe/run@1"     // run --json, which compare reads
	compareFormat = "graphpipe/compare@1" // compare --json
	metricsFormat = "graphpipe/metrics@1" // each line of run --metrics
	profileFormat = "graphpipe/profile@1" // profile --json: the profile and its measurements
)
