package dag

import (
	"fmt"
	"strings"
)

// Error is one problem with a model: the thing at fault (an op, an input or the
// model itself), the field within it, and what is wrong.
type Error struct {
	Kind  string // "op", "input", "ops" (a cycle) or "" for the model as a whole
	Name  string // the op or input name; for a cycle, the ops joined by " -> "
	Field string // e.g. "attrs.out", "inputs", "shape"; may be empty
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch e.Kind {
	case "":
	case "ops":
		b.WriteString("ops ")
		b.WriteString(e.Name)
		b.WriteString(" ")
	default:
		fmt.Fprintf(&b, "%s %q: ", e.Kind, e.Name)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one model, in a stable order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Lines renders each problem on its own line, prefixed by the file name.
func (es Errors) Lines(file string) []string {
	out := make([]string, len(es))
	for i, e := range es {
		if file == "" {
			out[i] = e.Error()
		} else {
			out[i] = file + ": " + e.Error()
		}
	}
	return out
}

// errs collects problems while parsing or building.
type errs struct{ list Errors }

func (c *errs) model(field, format string, args ...any) {
	c.list = append(c.list, &Error{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (c *errs) op(name, field, format string, args ...any) {
	c.list = append(c.list, &Error{Kind: "op", Name: name, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (c *errs) input(name, field, format string, args ...any) {
	c.list = append(c.list, &Error{Kind: "input", Name: name, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (c *errs) err() error {
	if len(c.list) == 0 {
		return nil
	}
	return c.list
}
