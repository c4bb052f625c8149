// Package logtest holds what tests use to read logs: a [Buffer] that a zerolog logger (or a
// child process's output) writes from its goroutines while the test reads it.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: Write from any goroutine, String from the
// test. The zero value is an empty Buffer ready to use; a Buffer must not be copied after its
// first use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
