package microbatch

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseAction reads an action as Action.String writes it: "3F", "3B", "3W",
// "3Sa@e1" (send activations of micro-batch 3 on edge 1), "3Rg@e0".
func ParseAction(s string) (Action, error) {
	bad := func() (Action, error) {
		return Action{}, fmt.Errorf("action %q: want <micro-batch><F|B|W> or <micro-batch><S|R><a|g>@e<edge>", s)
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || i > 9 || s[0] == '0' && i > 1 {
		return bad()
	}
	mb, _ := strconv.Atoi(s[:i])
	a := Action{Kind: Kind(s[i]), MB: mb}
	rest := s[i+1:]
	switch a.Kind {
	case Forward, Backward, Weight:
		if rest != "" {
			return bad()
		}
		return a, nil
	case Send, Recv:
		if len(rest) < 4 || (rest[0] != byte(Act) && rest[0] != byte(Grad)) || !strings.HasPrefix(rest[1:], "@e") {
			return bad()
		}
		a.Dir = Dir(rest[0])
		e, err := strconv.Atoi(rest[3:])
		digits := rest[3:]
		if err != nil || e < 0 || len(digits) > 9 || digits[0] < '0' || digits[0] > '9' || digits[0] == '0' && len(digits) > 1 {
			return bad()
		}
		a.Edge = e
		return a, nil
	}
	return bad()
}
