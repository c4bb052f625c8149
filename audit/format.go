package audit

import (
	"fmt"
	"unicode/utf8"
)

// Format is an export's file format.
type Format string

// Formats.
const (
	JSONL Format = "jsonl" // one JSON object per line
	CSV   Format = "csv"   // RFC 4180 with a header row, LF line ends
)

// ParseFormat accepts "jsonl" or "csv" ("" is jsonl). Errors wrap ErrInvalid.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", JSONL:
		return JSONL, nil
	case CSV:
		return CSV, nil
	}
	return "", fmt.Errorf("format %q: %w: use jsonl or csv", s, ErrInvalid)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslash and control characters
// escaped, invalid UTF-8 replaced by U+FFFD, and U+2028/2029 escaped for JavaScript readers.
func appendJSONString(b []byte, s []byte) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCSVField appends s as one CSV field, quoted when it holds a comma, quote, CR, LF or
// leading space, with quotes doubled.
func appendCSVField(b []byte, s []byte) []byte {
	quote := len(s) > 0 && s[0] == ' '
	if !quote {
		for _, c := range s {
			if c == ',' || c == '"' || c == '\n' || c == '\r' {
				quote = true
				break
			}
		}
	}
	if !quote {
		return append(b, s...)
	}
	b = append(b, '"')
	for _, c := range s {
		if c == '"' {
			b = append(b, '"', '"')
		} else {
			b = append(b, c)
		}
	}
	return append(b, '"')
}
