package readme

import (
	"fmt"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	Line     int    // its opening fence's, from 1
	Lang     string // the info string's first word
	Skip     string // why it is not run; "" when it is
	InRepo   bool   // readme-repo: run in the repository's root
	Commands []Command
}

// Command is one command of a block: lines joined by trailing backslashes.
type Command struct {
	Line int    // its first line's, from 1
	Text string // as written, continuation lines and all
}

// shells are the info strings whose blocks are run.
var shells = map[string]bool{"sh": true, "bash": true, "shell": true}

// ParseError is a problem with the Markdown file: its line and what.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Parse finds md's fenced code blocks and their commands.
func Parse(md []byte) ([]Block, error) {
	lines := strings.Split(strings.ReplaceAll(string(md), "\r\n", "\n"), "\n")
	var blocks []Block
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openingFence(lines[i])
		if !ok {
			continue
		}
		b, err := newBlock(i+1, info)
		if err != nil {
			return nil, err
		}
		end := i + 1
		for end < len(lines) && !closes(lines[end], fence) {
			end++
		}
		if end == len(lines) {
			return nil, &ParseError{i + 1, "the code block never closes"}
		}
		if b.Skip == "" {
			if b.Commands, err = commands(lines[i+1:end], i+2); err != nil {
				return nil, err
			}
		}
		blocks = append(blocks, b)
		i = end
	}
	return blocks, nil
}

// openingFence reads a line that opens a fenced block: up to three spaces,
// then three or more backticks or tildes, then the info string.
func openingFence(line string) (fence, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return "", "", false
	}
	n := len(t) - len(strings.TrimLeft(t, t[:1]))
	if n < 3 {
		return "", "", false
	}
	info = strings.TrimSpace(t[n:])
	if t[0] == '`' && strings.Contains(info, "`") {
		return "", "", false // an inline code span, not a fence
	}
	return t[:n], info, true
}

// closes says whether line closes a block opened by fence.
func closes(line, fence string) bool {
	t := strings.TrimSpace(line)
	return len(line)-len(strings.TrimLeft(line, " ")) <= 3 && strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == ""
}

// newBlock reads an info string: the language, and the annotation.
func newBlock(line int, info string) (Block, error) {
	b := Block{Line: line}
	words := strings.Fields(info)
	if len(words) > 0 {
		b.Lang = words[0]
	}
	rest := strings.TrimSpace(strings.TrimPrefix(info, b.Lang))
	switch {
	case strings.HasPrefix(rest, "readme-skip"):
		b.Skip = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(rest, "readme-skip"), ":"))
		if b.Skip == "" {
			return b, &ParseError{line, "readme-skip needs a reason: readme-skip: WHY"}
		}
	case rest == "readme-repo":
		b.InRepo = true
	case strings.Contains(rest, "readme-"):
		return b, &ParseError{line, fmt.Sprintf("unknown annotation %q (known: readme-skip: WHY, readme-repo)", rest)}
	}
	if b.Skip == "" && !shells[b.Lang] {
		lang := b.Lang
		if lang == "" {
			lang = "plain"
		}
		b.Skip = fmt.Sprintf("a %s block, not a shell one", lang)
		if b.InRepo {
			return b, &ParseError{line, "readme-repo on a block that is not run (" + b.Skip + ")"}
		}
	}
	return b, nil
}

// commands splits a block's lines, the first of which is line first.
func commands(lines []string, first int) ([]Command, error) {
	var out []Command
	var cur *Command
	for i, l := range lines {
		n := first + i
		if strings.Contains(l, "<<") && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			return nil, &ParseError{n, "a here document: the runner cannot tell where it ends; write the file another way"}
		}
		if cur == nil {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			out = append(out, Command{Line: n})
			cur = &out[len(out)-1]
			cur.Text = l
		} else {
			cur.Text += "\n" + l
		}
		if !strings.HasSuffix(l, "\\") {
			cur = nil
		}
	}
	if cur != nil {
		return nil, &ParseError{cur.Line, "the command's last line ends in a backslash"}
	}
	return out, nil
}
