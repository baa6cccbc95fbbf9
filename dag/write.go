package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Write renders a model in canonical form, in its format version: one input
// or op per line, every attribute of an op's kind written out resolved. A @1
// model renders as it always has.
func Write(m *Model) []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	fmt.Fprintf(&b, "  \"format\": %s,\n", quote(formatOf(m.Version)))
	fmt.Fprintf(&b, "  \"name\": %s,\n", quote(m.Name))
	fmt.Fprintf(&b, "  \"batch_size\": %d,\n", m.BatchSize)
	fmt.Fprintf(&b, "  \"seed\": %d,\n", m.Seed)
	b.WriteString("  \"inputs\": [")
	for i, in := range m.Inputs {
		b.WriteString(sep(i))
		writeInput(&b, &in)
	}
	b.WriteString(closer(len(m.Inputs)) + "],\n")
	b.WriteString("  \"ops\": [")
	for i := range m.Ops {
		b.WriteString(sep(i))
		writeOp(&b, &m.Ops[i], max(1, m.Version))
	}
	b.WriteString(closer(len(m.Ops)) + "]\n}\n")
	return b.Bytes()
}

func sep(i int) string {
	if i == 0 {
		return "\n    "
	}
	return ",\n    "
}

func closer(n int) string {
	if n == 0 {
		return ""
	}
	return "\n  "
}

func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func ints(s []int64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func writeInput(b *bytes.Buffer, in *Input) {
	fmt.Fprintf(b, `{"name": %s, "shape": %s, "dtype": %s`, quote(in.Name), ints(in.Shape), quote(string(in.DType)))
	if in.Range != nil {
		fmt.Fprintf(b, `, "range": %s`, ints(in.Range[:]))
	}
	b.WriteString("}")
}

func writeOp(b *bytes.Buffer, op *Op, version int) {
	names := make([]string, len(op.Inputs))
	for i, n := range op.Inputs {
		names[i] = quote(n)
	}
	fmt.Fprintf(b, `{"name": %s, "op": %s, "inputs": [%s]`, quote(op.Name), quote(string(op.Kind)), strings.Join(names, ", "))
	var parts []string
	for _, s := range attrSpecs(op.Kind, version) {
		if s.optional && !(s.name == "scalar" && op.Attrs.HasScalar) {
			continue
		}
		parts = append(parts, quote(s.name)+": "+attrText(op.Attrs.field(s)))
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, `, "attrs": {%s}`, strings.Join(parts, ", "))
	}
	if len(op.ParamNames) > 0 && version >= 2 {
		slots := make([]string, 0, len(op.ParamNames))
		for s := range op.ParamNames {
			slots = append(slots, s)
		}
		sort.Strings(slots)
		for i, s := range slots {
			slots[i] = quote(s) + ": " + quote(op.ParamNames[s])
		}
		fmt.Fprintf(b, `, "params": {%s}`, strings.Join(slots, ", "))
	}
	b.WriteString("}")
}

func attrText(v any) string {
	switch v := v.(type) {
	case *int64:
		return strconv.FormatInt(*v, 10)
	case *bool:
		return strconv.FormatBool(*v)
	case *float64:
		return strconv.FormatFloat(*v, 'g', -1, 64)
	case *string:
		return quote(*v)
	case *DType:
		return quote(string(*v))
	case *Shape:
		return ints(*v)
	case *[]float64:
		parts := make([]string, len(*v))
		for i, f := range *v {
			parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic(fmt.Sprintf("dag: attrText: unhandled %T", v))
}
