package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// LoadFile reads, parses and builds a model file. Problems come back as Errors
// (every line names the op or field); a file that cannot be read, or that is
// not a regular file (a FIFO, a device, a directory), as the OS error.
func LoadFile(path string) (*Graph, error) {
	data, err := regular.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(data)
}

// Load parses and builds a model document.
func Load(data []byte) (*Graph, error) {
	m, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return Build(m)
}

// Parse decodes a model document. It checks the JSON structure, field names and
// types and applies attribute defaults; Build checks everything else.
func Parse(data []byte) (*Model, error) {
	c := &errs{}
	top, ok := decodeObject(data, c)
	if !ok {
		return nil, c.err()
	}
	p := &parser{c: c}
	m := p.model(top)
	if err := c.err(); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeObject reads one JSON object and nothing after it.
func decodeObject(data []byte, c *errs) (map[string]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		c.model("", "not a JSON object: %s", jsonProblem(data, err))
		return nil, false
	}
	if top == nil {
		c.model("", "not a JSON object: the document is null")
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		c.model("", "not a JSON object: unexpected data after the closing brace")
		return nil, false
	}
	return top, true
}

// jsonProblem describes a decoding error with a line and column where it has one.
func jsonProblem(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		return "the document is " + te.Value + ", want an object"
	case errors.Is(err, io.EOF):
		return "the file is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the document ends early"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if off >= 0 {
		line, col := 1, 1
		for _, b := range data[:min(int(off), len(data))] {
			if b == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
		msg = fmt.Sprintf("%s (line %d, column %d)", msg, line, col)
	}
	return msg
}

// parser reads the fields of a model document into a Model.
type parser struct {
	c       *errs
	version int // the document's format version, once read
}

var (
	modelFields = []string{"format", "name", "batch_size", "seed", "inputs", "ops"}
	inputFields = []string{"name", "shape", "dtype", "range"}
	opFields    = []string{"name", "op", "inputs", "attrs"}
	opFieldsV2  = []string{"name", "op", "inputs", "attrs", "params"}
)

// unknown reports fields that are not in known, sorted by name.
func unknown(obj map[string]json.RawMessage, known []string, report func(field string)) {
	var extra []string
	for k := range obj {
		found := false
		for _, f := range known {
			found = found || k == f
		}
		if !found {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		report(k)
	}
}

func (p *parser) model(top map[string]json.RawMessage) *Model {
	m := &Model{}
	unknown(top, modelFields, func(f string) { p.c.model(strconv.Quote(f), "unknown field") })
	var format string
	p.version = 2 // an unreadable format: read the rest as the newest
	if p.field(top, "format", true, &format, func(msg string) { p.c.model("format", "%s", msg) }) {
		switch format {
		case Format:
			p.version = 1
		case FormatV2:
		default:
			p.c.model("format", "is %q, want %q or %q", format, Format, FormatV2)
		}
	}
	m.Version = p.version
	onModel := func(field string) func(string) { return func(msg string) { p.c.model(field, "%s", msg) } }
	p.field(top, "name", false, &m.Name, onModel("name"))
	if p.field(top, "batch_size", true, &m.BatchSize, onModel("batch_size")) && m.BatchSize <= 0 {
		p.c.model("batch_size", "must be a positive integer, got %d", m.BatchSize)
	}
	p.field(top, "seed", false, &m.Seed, onModel("seed"))
	var inputs, ops []json.RawMessage
	if p.field(top, "inputs", true, &inputs, onModel("inputs")) {
		for i, raw := range inputs {
			if in, ok := p.input(i, raw); ok {
				m.Inputs = append(m.Inputs, in)
			}
		}
	}
	if p.field(top, "ops", true, &ops, onModel("ops")) {
		for i, raw := range ops {
			if op, ok := p.op(i, raw); ok {
				m.Ops = append(m.Ops, op)
			}
		}
	}
	return m
}

// object decodes raw as a JSON object, reporting through bad.
func object(raw json.RawMessage, bad func(string)) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		bad("must be an object")
		return nil, false
	}
	return obj, true
}

// name reads the "name" field of an input or op; where must name it otherwise.
func (p *parser) name(obj map[string]json.RawMessage, where string) (string, bool) {
	var name string
	return name, p.field(obj, "name", true, &name, func(msg string) { p.c.model(where+".name", "%s", msg) })
}

func (p *parser) input(i int, raw json.RawMessage) (Input, bool) {
	where := fmt.Sprintf("inputs[%d]", i)
	obj, ok := object(raw, func(msg string) { p.c.model(where, "%s", msg) })
	if !ok {
		return Input{}, false
	}
	in := Input{}
	if in.Name, ok = p.name(obj, where); !ok {
		return in, false
	}
	n0 := len(p.c.list)
	bad := func(field string) func(string) {
		return func(msg string) { p.c.input(in.Name, field, "%s", msg) }
	}
	unknown(obj, inputFields, func(f string) { p.c.input(in.Name, strconv.Quote(f), "unknown field") })
	p.field(obj, "shape", true, &in.Shape, bad("shape"))
	p.field(obj, "dtype", true, &in.DType, bad("dtype"))
	if _, has := obj["range"]; has {
		var r []int64
		if p.field(obj, "range", false, &r, bad("range")) {
			if len(r) != 2 {
				p.c.input(in.Name, "range", "must be [lo, hi], got %d numbers", len(r))
			} else {
				in.Range = &[2]int64{r[0], r[1]}
			}
		}
	}
	return in, len(p.c.list) == n0
}

func (p *parser) op(i int, raw json.RawMessage) (Op, bool) {
	where := fmt.Sprintf("ops[%d]", i)
	obj, ok := object(raw, func(msg string) { p.c.model(where, "%s", msg) })
	if !ok {
		return Op{}, false
	}
	op := Op{}
	if op.Name, ok = p.name(obj, where); !ok {
		return op, false
	}
	n0 := len(p.c.list)
	bad := func(field string) func(string) {
		return func(msg string) { p.c.op(op.Name, field, "%s", msg) }
	}
	fields := opFields
	if p.version >= 2 {
		fields = opFieldsV2
	}
	unknown(obj, fields, func(f string) {
		if f == "params" {
			p.c.op(op.Name, "params", "is a field of %s; this file is %s", FormatV2, Format)
			return
		}
		p.c.op(op.Name, strconv.Quote(f), "unknown field")
	})
	if _, has := obj["params"]; has && p.version >= 2 {
		op.ParamNames = p.paramNames(op.Name, obj["params"])
	}
	var kind string
	if p.field(obj, "op", true, &kind, bad("op")) {
		op.Kind = Kind(kind)
		if !op.Kind.Known() {
			p.c.op(op.Name, "op", "unknown operator %q (known: %s)", kind, knownKinds(p.version))
		}
	}
	if p.field(obj, "inputs", true, &op.Inputs, bad("inputs")) && op.Inputs == nil {
		op.Inputs = []string{}
	}
	if op.Kind.Known() {
		op.Attrs = p.attrs(&op, obj["attrs"])
	} else if _, has := obj["attrs"]; has {
		var skip map[string]json.RawMessage
		p.field(obj, "attrs", false, &skip, bad("attrs"))
	}
	return op, len(p.c.list) == n0
}

// attrs reads an op's attributes against its kind's table and applies defaults.
func (p *parser) attrs(op *Op, raw json.RawMessage) Attrs {
	a := DefaultAttrs(op.Kind)
	var obj map[string]json.RawMessage
	if raw != nil {
		var ok bool
		if obj, ok = object(raw, func(msg string) { p.c.op(op.Name, "attrs", "%s", msg) }); !ok {
			return a
		}
	}
	specs := attrSpecs(op.Kind, p.version)
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	unknown(obj, names, func(f string) {
		if s, ok := attrSpecOf(op.Kind, f); ok && max(1, s.since) > p.version {
			p.c.op(op.Name, "attrs."+f, "is an attribute of %s in %s; this file is %s", op.Kind, formatOf(s.since), formatOf(p.version))
			return
		}
		known := "none"
		if len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		if checkName(f) != "" {
			f = strconv.Quote(f)
		}
		p.c.op(op.Name, "attrs."+f, "unknown attribute for %s (known: %s)", op.Kind, known)
	})
	for _, s := range specs {
		bad := func(msg string) { p.c.op(op.Name, "attrs."+s.name, "%s", msg) }
		if p.field(obj, s.name, s.required, a.field(s), bad) && s.name == "scalar" {
			a.HasScalar = true
		}
	}
	if derive := kinds[op.Kind].derive; derive != nil {
		derive(&a, func(name string) bool { _, has := obj[name]; return has })
	}
	return a
}

// paramNames reads an op's "params" object: slot → parameter name.
func (p *parser) paramNames(op string, raw json.RawMessage) map[string]string {
	var obj map[string]json.RawMessage
	if !p.field(map[string]json.RawMessage{"params": raw}, "params", false, &obj, func(msg string) { p.c.op(op, "params", "%s", msg) }) {
		return nil
	}
	out := map[string]string{}
	for slot, v := range obj {
		var name string
		if msg := decodeValue(v, &name); msg != "" {
			p.c.op(op, "params."+slot, "%s", msg)
			continue
		}
		out[slot] = name
	}
	return out
}

// field decodes obj[name] into dst (a pointer to a string, int64, float64, bool,
// DType, Shape, []string, []int64, []json.RawMessage or a raw object map). It
// reports a missing required field or a wrong type through bad and returns
// whether a value was read.
func (p *parser) field(obj map[string]json.RawMessage, name string, required bool, dst any, bad func(string)) bool {
	raw, has := obj[name]
	if !has {
		if required {
			bad("required")
		}
		return false
	}
	if msg := decodeValue(raw, dst); msg != "" {
		bad(msg)
		return false
	}
	return true
}

// decodeValue decodes raw into dst, returning a problem or "".
func decodeValue(raw json.RawMessage, dst any) string {
	switch d := dst.(type) {
	case *string:
		if json.Unmarshal(raw, d) != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return "must be a string"
		}
	case *DType:
		var s string
		if json.Unmarshal(raw, &s) != nil || (s != string(Float32) && s != string(Int32)) {
			return `must be "float32" or "int32"`
		}
		*d = DType(s)
	case *bool:
		if json.Unmarshal(raw, d) != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return "must be true or false"
		}
	case *int64:
		v, msg := integer(raw)
		*d = v
		return msg
	case *float64:
		return number(raw, d)
	case *Shape:
		return integers(raw, (*[]int64)(d), "must be an array of integers")
	case *[]float64:
		return numbers(raw, d)
	case *[]int64:
		return integers(raw, d, "must be an array of integers")
	case *[]string:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || list == nil && !isEmptyArray(raw) {
			return "must be an array of strings"
		}
		*d = make([]string, len(list))
		for i, r := range list {
			if decodeValue(r, &(*d)[i]) != "" {
				return "must be an array of strings"
			}
		}
	case *[]json.RawMessage:
		if json.Unmarshal(raw, d) != nil || *d == nil && !isEmptyArray(raw) {
			return "must be an array"
		}
	case *map[string]json.RawMessage:
		if json.Unmarshal(raw, d) != nil || *d == nil {
			return "must be an object"
		}
	default:
		panic(fmt.Sprintf("dag: decodeValue: unhandled %T", dst))
	}
	return ""
}

func isEmptyArray(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("[]"))
}

// integer decodes a JSON integer literal that fits in int64.
func integer(raw json.RawMessage) (int64, string) {
	var n json.Number
	if !isNumberLiteral(raw) || json.Unmarshal(raw, &n) != nil {
		return 0, "must be an integer"
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Sprintf("%s does not fit in a 64-bit integer", n)
		}
		return 0, fmt.Sprintf("must be an integer, got %s", n)
	}
	return v, ""
}

func number(raw json.RawMessage, d *float64) string {
	var n json.Number
	if !isNumberLiteral(raw) || json.Unmarshal(raw, &n) != nil {
		return "must be a number"
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(v, 0) {
		return fmt.Sprintf("%s is out of range", n)
	}
	*d = v
	return ""
}

func integers(raw json.RawMessage, d *[]int64, msg string) string {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || list == nil && !isEmptyArray(raw) {
		return msg
	}
	*d = make([]int64, len(list))
	for i, r := range list {
		v, bad := integer(r)
		if bad != "" {
			return fmt.Sprintf("element %d %s", i, bad)
		}
		(*d)[i] = v
	}
	return ""
}

// numbers decodes an array of numbers, or a single number as a list of one.
func numbers(raw json.RawMessage, d *[]float64) string {
	if isNumberLiteral(raw) {
		var v float64
		if msg := number(raw, &v); msg != "" {
			return msg
		}
		*d = []float64{v}
		return ""
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || list == nil && !isEmptyArray(raw) {
		return "must be a number or an array of numbers"
	}
	*d = make([]float64, len(list))
	for i, r := range list {
		if msg := number(r, &(*d)[i]); msg != "" {
			return fmt.Sprintf("element %d %s", i, msg)
		}
	}
	return ""
}

// isNumberLiteral refuses quoted numbers and null, which json.Number accepts.
func isNumberLiteral(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && (t[0] == '-' || t[0] >= '0' && t[0] <= '9')
}
