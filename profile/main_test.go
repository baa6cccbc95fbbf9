package profile

import (
	"os"
	"testing"
)

// TestMain lets this test binary be a measuring child (Child), as
// graphpipe's binary is.
func TestMain(m *testing.M) {
	Child()
	os.Exit(m.Run())
}
