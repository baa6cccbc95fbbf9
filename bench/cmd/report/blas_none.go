//go:build !openblas || !cgo

package main

func openblasRate(int) (float64, bool) { return 0, false }

func openblasCore() string { return "" }
