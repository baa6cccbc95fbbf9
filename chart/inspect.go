package chart

import (
	"bytes"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"strings"
)

// Info is what Inspect read from a chart file.
type Info struct {
	Format        Format
	Width, Height int      // PNG: pixels; SVG: points
	Texts         []string // SVG: every text element's; PNG: every iTXt chunk's, as "keyword: text"
	Generator     string   // SVG: the comment before the root element (the library's name)
}

// Has reports whether some text of the chart contains s.
func (in *Info) Has(s string) bool {
	for _, t := range in.Texts {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// Inspect reads a chart file back: an SVG must parse as XML with an svg
// root element, a PNG must decode whole. It is how the tests see what a
// chart carries.
func Inspect(data []byte) (*Info, error) {
	if bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		return inspectPNG(data)
	}
	return inspectSVG(data)
}

func inspectPNG(data []byte) (*Info, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("chart: PNG: %w", err)
	}
	b := img.Bounds()
	in := &Info{Format: PNG, Width: b.Dx(), Height: b.Dy()}
	for rest := data[8:]; len(rest) >= 12; {
		n := binary.BigEndian.Uint32(rest)
		if uint64(n)+12 > uint64(len(rest)) {
			break
		}
		if string(rest[4:8]) == "iTXt" {
			if t, ok := itxt(rest[8 : 8+n]); ok {
				in.Texts = append(in.Texts, t)
			}
		}
		rest = rest[12+n:]
	}
	return in, nil
}

// itxt reads an uncompressed iTXt chunk as "keyword: text".
func itxt(d []byte) (string, bool) {
	parts := bytes.SplitN(d, []byte{0}, 2) // keyword, the rest
	if len(parts) < 2 || len(parts[1]) < 2 || parts[1][0] != 0 {
		return "", false
	}
	rest := bytes.SplitN(parts[1][2:], []byte{0}, 3) // language, translated keyword, text
	if len(rest) < 3 {
		return "", false
	}
	return string(parts[0]) + ": " + string(rest[2]), true
}

func inspectSVG(data []byte) (*Info, error) {
	in := &Info{Format: SVG}
	d := xml.NewDecoder(bytes.NewReader(data))
	var stack []string
	root := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("chart: SVG: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				if root || t.Name.Local != "svg" {
					return nil, fmt.Errorf("chart: SVG: the root element is <%s>, not one <svg>", t.Name.Local)
				}
				root = true
				fmt.Sscanf(attr(t, "width"), "%d", &in.Width)
				fmt.Sscanf(attr(t, "height"), "%d", &in.Height)
			}
			stack = append(stack, t.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "text" {
				in.Texts = append(in.Texts, string(t))
			}
		case xml.Comment:
			if !root {
				in.Generator = strings.TrimSpace(string(t))
			}
		}
	}
	if !root {
		return nil, fmt.Errorf("chart: SVG: no <svg> element")
	}
	return in, nil
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}
