package supervise

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds what ExpandHostlist expands a list to: more hosts than
// any allocation holds, few enough that a mistyped range cannot exhaust
// memory.
const MaxHosts = 1 << 16

// HostlistError is a host list in Slurm's syntax that ExpandHostlist
// cannot read: the list, and what is wrong with it.
type HostlistError struct {
	List, Msg string
}

func (e *HostlistError) Error() string { return fmt.Sprintf("host list %q: %s", e.List, e.Msg) }

// ExpandHostlist expands a host list in Slurm's syntax (what
// SLURM_JOB_NODELIST holds) into its host names, in order: names separated
// by commas, each with any number of bracketed sets of numbers and ranges,
// "node[01-04,07]" being node01, node02, node03, node04 and node07 (a
// range keeps the zero padding of its first number), "rack[1-2]-gpu[1-2]"
// the product of both sets, the leftmost varying slowest.
func ExpandHostlist(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, &HostlistError{list, "empty"}
	}
	var hosts []string
	for _, item := range splitTop(list) {
		if item == "" {
			return nil, &HostlistError{list, "an empty name between commas"}
		}
		expanded, err := expandItem(item, MaxHosts-len(hosts))
		if err != nil {
			return nil, &HostlistError{list, err.Error()}
		}
		hosts = append(hosts, expanded...)
	}
	return hosts, nil
}

// splitTop splits list at the commas outside brackets.
func splitTop(list string) []string {
	var items []string
	depth, start := 0, 0
	for i, c := range list {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, list[start:i])
				start = i + 1
			}
		}
	}
	return append(items, list[start:])
}

// expandItem expands one name of a list, its bracketed sets multiplied out;
// more than limit hosts is an error.
func expandItem(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.IndexByte(item, ']') >= 0 {
			return nil, fmt.Errorf("%q: a ']' with no '['", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: a '[' that never closes", item)
	}
	end += open
	if strings.IndexByte(item[open+1:end], '[') >= 0 {
		return nil, fmt.Errorf("%q: brackets inside brackets", item)
	}
	if strings.IndexByte(item[:open], ']') >= 0 {
		return nil, fmt.Errorf("%q: a ']' with no '['", item)
	}
	nums, err := expandSet(item[open+1:end], limit)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", item, err)
	}
	rest, err := expandItem(item[end+1:], limit)
	if err != nil {
		return nil, err
	}
	if len(nums)*len(rest) > limit {
		return nil, fmt.Errorf("%q: more than %d hosts", item, MaxHosts)
	}
	out := make([]string, 0, len(nums)*len(rest))
	for _, n := range nums {
		for _, r := range rest {
			out = append(out, item[:open]+n+r)
		}
	}
	return out, nil
}

// expandSet expands the inside of brackets, "01-04,07", into its numbers
// as written (zero padded as the range's first one is).
func expandSet(set string, limit int) ([]string, error) {
	var out []string
	for _, part := range strings.Split(set, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !digits(lo) || isRange && !digits(hi) {
			return nil, fmt.Errorf("[%s]: %q is neither a number nor a range of numbers", set, part)
		}
		if !isRange {
			out = append(out, lo)
			continue
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		switch {
		case errA != nil || errB != nil:
			return nil, fmt.Errorf("[%s]: %q: numbers too large", set, part)
		case b < a:
			return nil, fmt.Errorf("[%s]: %q runs backwards", set, part)
		case b-a >= limit-len(out):
			return nil, fmt.Errorf("[%s]: more than %d hosts", set, MaxHosts)
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", width, n))
		}
	}
	return out, nil
}

// digits says s is a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
