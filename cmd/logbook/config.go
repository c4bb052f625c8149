package main

import (
	"fmt"
	"strings"
)

// Secret is a value that must never be shown: tokens, keys, passwords. It prints, marshals
// and logs as a fixed mask.
type Secret string

const mask = "[redacted]"

func (s Secret) String() string               { return mask }
func (s Secret) GoString() string             { return mask }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + mask + `"`), nil }
func (s Secret) MarshalText() ([]byte, error) { return []byte(mask), nil }

// Reveal returns the secret's value, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// databaseURL returns DATABASE_URL or a clear error naming it.
func databaseURL(e env) (string, error) {
	u := strings.TrimSpace(e.getenv("DATABASE_URL"))
	if u == "" {
		return "", fmt.Errorf("DATABASE_URL is not set (e.g. postgres://logbook@127.0.0.1:5432/logbook)")
	}
	return u, nil
}
