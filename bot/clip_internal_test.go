package bot

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// An error recorded in an event or shown in a thread is cut short without splitting a
// character: a 200-byte cut of this text would fall inside an "é".
func TestShortErrorKeepsCharactersWhole(t *testing.T) {
	text := "a" + strings.Repeat("é", 150)
	got := shortError(errors.New(text))
	if !utf8.ValidString(got) || len(got) > 200 {
		t.Fatalf("shortError = %q (%d bytes): want valid UTF-8 of at most 200 bytes", got, len(got))
	}
	if body := strings.TrimSuffix(got, "…"); body == got || !strings.HasPrefix(text, body) {
		t.Fatalf("shortError = %q: want the start of the error and a mark where it was cut", got)
	}
}
