package bench

import (
	"os"
	"testing"
)

// TestImportSectionQuick runs the import benchmark's quick form when asked
// (GRAPHPIPE_BENCH_IMPORT=1): minutes and gigabytes of disk.
func TestImportSectionQuick(t *testing.T) {
	if os.Getenv("GRAPHPIPE_BENCH_IMPORT") == "" {
		t.Skip("set GRAPHPIPE_BENCH_IMPORT=1 to run the import benchmark")
	}
	s, err := ImportSection(Config{Quick: os.Getenv("GRAPHPIPE_BENCH_FULL") == "", Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Markdown())
}

// TestDeviceCallsSection runs the device-calls benchmark when asked
// (GRAPHPIPE_BENCH_DEVICE=1; GRAPHPIPE_BENCH_FULL=1 adds the paper's MMT,
// seconds and 2 GB), from the repository's root as the report runs it.
func TestDeviceCallsSection(t *testing.T) {
	if os.Getenv("GRAPHPIPE_BENCH_DEVICE") == "" {
		t.Skip("set GRAPHPIPE_BENCH_DEVICE=1 to run the device-calls benchmark")
	}
	t.Chdir("..")
	s, err := DeviceCallsSection(Config{Quick: os.Getenv("GRAPHPIPE_BENCH_FULL") == "", Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Markdown())
}
