package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeOpTimesErrors(t *testing.T) {
	good := `{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}}`
	if _, err := DecodeOpTimes([]byte(good)); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	for _, c := range []struct{ name, from, to, field string }{
		{"format", `optimes@1`, `optimes@2`, "format"},
		{"hash", `"ab"`, `""`, "model_sha256"},
		{"no ops", `"ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}`, `"ops":{}`, "ops"},
		{"descending", `[1,2],"f`, `[2,1],"f`, "ops.x"},
		{"zero size", `[1,2],"f`, `[0,2],"f`, "ops.x"},
		{"short", `"forward_s":[1,2]`, `"forward_s":[1]`, "ops.x"},
		{"negative", `"weight_grad_s":[0,0]`, `"weight_grad_s":[0,-1]`, "ops.x"},
		{"unknown field", `"device":"cpu"`, `"device":"cpu","extra":1`, "file"},
		{"trailing", `}}}`, `}}}{}`, "file"},
		{"not json", good, `[`, "file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(good, c.from, c.to, 1)
			if bad == good {
				t.Fatal("the case changes nothing")
			}
			_, err := DecodeOpTimes([]byte(bad))
			var oe *OpTimesError
			if !errors.As(err, &oe) || oe.Field != c.field {
				t.Fatalf("got %v, want an error in %s", err, c.field)
			}
		})
	}
}

func FuzzDecodeOpTimes(f *testing.F) {
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}}`))
	f.Add([]byte(`{"format":"graphpipe/optimes@1","ops":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ot, err := DecodeOpTimes(data)
		if err != nil {
			return
		}
		enc, err := ot.Encode()
		if err != nil {
			t.Fatalf("a decoded file does not encode: %v", err)
		}
		back, err := DecodeOpTimes(enc)
		if err != nil || !reflect.DeepEqual(back, ot) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, back, ot)
		}
	})
}
