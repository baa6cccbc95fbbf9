// Package models builds the model zoo: the paper's multi-branch models (MMT,
// DLRM, CANDLE-Uno), its 2-branch case study, a sequential Transformer of
// MMT's size (the control) and an MLP.
//
// The contract:
//
//  1. Lookup(name) finds a zoo entry; its Default config is the paper's
//     configuration (../shared/background.md) and its Small config trains in
//     seconds on a CPU.
//  2. Entry.Build(cfg) checks the config and returns a validated *dag.Graph.
//     Only the Config fields an entry lists in Knobs affect it.
//  3. Builders are deterministic: the same config gives the same graph, op for
//     op, and the same model file through dag.Write.
package models
