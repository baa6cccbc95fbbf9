package dataset

import "fmt"

// Error is a problem with a dataset: a file, one of its tensors, or one
// sample (Row, counted from the dataset's first sample; -1 when the problem
// is not about one).
type Error struct {
	Path   string
	Tensor string
	Row    int
	Msg    string
	// Changed says the file changed while in use (a *ChangedError): the
	// environment's doing, not a problem of the data.
	Changed bool
}

func (e *Error) Error() string {
	s := e.Path
	if e.Tensor != "" {
		s += fmt.Sprintf(": tensor %q", e.Tensor)
	}
	if e.Row >= 0 {
		s += fmt.Sprintf(": row %d", e.Row)
	}
	return s + ": " + e.Msg
}

func errorf(path, tensor string, row int, format string, args ...any) *Error {
	return &Error{Path: path, Tensor: tensor, Row: row, Msg: fmt.Sprintf(format, args...)}
}
