// Package maketargets tests the Makefile's targets that a test can run in
// seconds, in a temporary directory, with a graphpipe built for the test
// (BIN=...) and the build step a no-op (GO=true): that make demo needs
// nothing but graphpipe, and that make replay fails when a replay fails. It
// holds no code.
package maketargets
