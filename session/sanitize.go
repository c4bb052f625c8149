package session

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf8"
)

const replacement = `\ufffd`

// encodePayload encodes p as a JSON object that PostgreSQL's jsonb accepts. Invalid UTF-8,
// U+0000 and unpaired surrogates each become U+FFFD; sanitized reports whether that happened.
func encodePayload(p any) (b json.RawMessage, sanitized bool, err error) {
	switch v := p.(type) {
	case nil:
		return json.RawMessage(`{}`), false, nil
	case json.RawMessage:
		b = bytes.Clone(v)
	case []byte:
		b = bytes.Clone(v)
	default:
		// encoding/json silently turns invalid UTF-8 in Go strings into U+FFFD: find out
		// whether it will, so the event says so.
		sanitized = hasInvalidUTF8(reflect.ValueOf(p), 0)
		b, err = json.Marshal(p)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
		}
	}
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
		sanitized = true
	}
	if !json.Valid(b) {
		return nil, false, fmt.Errorf("%w: not valid JSON", ErrInvalidPayload)
	}
	if first := bytes.TrimLeft(b, " \t\r\n"); len(first) == 0 || first[0] != '{' {
		return nil, false, fmt.Errorf("%w: a payload must be a JSON object", ErrInvalidPayload)
	}
	fixed, changed := fixEscapes(b)
	return fixed, sanitized || changed, nil
}

// fixEscapes rewrites the JSON escapes jsonb rejects (\u0000, unpaired surrogates) as \ufffd.
// In valid JSON every backslash starts an escape inside a string, so no string state is needed.
func fixEscapes(b []byte) ([]byte, bool) {
	var out []byte // allocated on the first change
	changed := false
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' || i+6 > len(b) {
			i++ // skip the escaped character
			continue
		}
		r := hex4(b[i+2 : i+6])
		bad := false
		switch {
		case r == 0:
			bad = true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo := hex4(b[i+8 : i+12]); lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // a valid pair
					continue
				}
			}
			bad = true
		case r >= 0xDC00 && r <= 0xDFFF:
			bad = true
		}
		if bad {
			if out == nil {
				out = make([]byte, 0, len(b))
			}
			out = append(out, b[last:i]...)
			out = append(out, replacement...)
			last = i + 6
			changed = true
		}
		i += 5
	}
	if !changed {
		return b, false
	}
	return append(out, b[last:]...), true
}

func hex4(b []byte) rune {
	n, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

// hasInvalidUTF8 reports whether any string reachable from v (as encoding/json would walk it)
// is invalid UTF-8.
func hasInvalidUTF8(v reflect.Value, depth int) bool {
	if !v.IsValid() || depth > 64 {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasInvalidUTF8(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && hasInvalidUTF8(v.Field(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if hasInvalidUTF8(it.Key(), depth+1) || hasInvalidUTF8(it.Value(), depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false // []byte and json.RawMessage are checked after encoding
		}
		for i := range v.Len() {
			if hasInvalidUTF8(v.Index(i), depth+1) {
				return true
			}
		}
	}
	return false
}
