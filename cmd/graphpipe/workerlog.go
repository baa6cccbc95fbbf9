package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// workerLog is what a worker process says on stderr: that it connected, the
// stage it was given, that it is done. Local workers (--quiet) say nothing:
// their coordinator speaks for them.
func workerLog(w io.Writer, quiet bool) func(format string, args ...any) {
	if quiet {
		return func(string, ...any) {}
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, "graphpipe worker: "+format+"\n", args...)
	}
}

// deviceName is where a worker computes, for its log.
func deviceName(dev *cuda.Device) string {
	if dev == nil {
		return "the CPU"
	}
	if dev.Emulated {
		return "the CUDA kernels' CPU emulator"
	}
	return fmt.Sprintf("GPU %d (%s; conv2d: %s)", dev.Ordinal, dev.Name, dev.ConvPath())
}

// redactURLs is a --nats list with the user information of each URL (a
// token or a password) replaced.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			u.User = url.User("redacted")
			p = u.String()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
