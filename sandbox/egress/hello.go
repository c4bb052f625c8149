package egress

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/logbook/logbook/session/clip"
)

// Bounds on the TLS ClientHello a tunnel to a name must start with.
const (
	helloTimeout  = 10 * time.Second
	maxHelloBytes = 32 << 10 // the ClientHello message, over however many records
	maxRecordBody = 1 << 14  // a TLS record's plaintext (RFC 8446 section 5.1)
)

// TLS constants of the ClientHello (RFC 8446, RFC 6066).
const (
	recordHandshake    = 22
	handshakeHello     = 1
	extServerName      = 0
	extEncryptedHello  = 0xfe0d // encrypted_client_hello (RFC 9849)
	serverNameHost     = 0
	alertLevelFatal    = 2
	alertUnrecognized  = 112 // unrecognized_name
	recordAlert        = 21
	maxSessionIDLength = 32
)

// errNotHello: the tunnel's first bytes are not a TLS ClientHello.
var errNotHello = errors.New("the tunnel does not start with a TLS ClientHello: a tunnel to a name carries TLS only")

// readClientHello reads the TLS records of a ClientHello from r, without answering it, and
// returns the bytes read (to send on unchanged) and the ClientHello's body. It reads no
// further than the ClientHello, and at most maxHelloBytes of it.
func readClientHello(r io.Reader) (raw, hello []byte, err error) {
	var msg []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return raw, nil, helloReadError(err, len(raw) == 0)
		}
		raw = append(raw, hdr[:]...)
		n := int(hdr[3])<<8 | int(hdr[4])
		switch {
		case hdr[0] != recordHandshake || hdr[1] != 3:
			return raw, nil, errNotHello
		case n == 0 || n > maxRecordBody:
			return raw, nil, fmt.Errorf("a TLS record of %d bytes: %w", n, errNotHello)
		case len(msg)+n > 4+maxHelloBytes:
			return raw, nil, fmt.Errorf("the TLS ClientHello is over %d bytes", maxHelloBytes)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if k, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+k], nil, helloReadError(err, false)
		}
		msg = append(msg, raw[start:]...)
		if msg[0] != handshakeHello {
			return raw, nil, errNotHello
		}
		if len(msg) < 4 {
			continue
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		switch {
		case size > maxHelloBytes:
			return raw, nil, fmt.Errorf("the TLS ClientHello is over %d bytes", maxHelloBytes)
		case len(msg) > 4+size:
			return raw, nil, errors.New("the TLS ClientHello's record holds more than the ClientHello")
		case len(msg) == 4+size:
			return raw, msg[4:], nil
		}
	}
}

// helloReadError says why a ClientHello could not be read (first: nothing was read yet).
func helloReadError(err error, first bool) error {
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &timeout) && timeout.Timeout():
		return errors.New("no whole TLS ClientHello came in time")
	case first && errors.Is(err, io.EOF):
		return fmt.Errorf("the tunnel closed before a TLS ClientHello: %w", errNotHello)
	}
	return fmt.Errorf("the TLS ClientHello is cut short: %w", errNotHello)
}

// serverName returns the host_name of a ClientHello's server_name extension (SNI), lower
// case; it refuses a ClientHello that is malformed, names no server, names one twice, or
// hides the name it reaches (encrypted_client_hello).
func serverName(hello []byte) (string, error) {
	b := bytesReader(hello)
	malformed := errors.New("the TLS ClientHello is malformed")
	if _, ok := b.take(2 + 32); !ok { // legacy_version, random
		return "", malformed
	}
	if sid, ok := b.vector8(); !ok || len(sid) > maxSessionIDLength {
		return "", malformed
	}
	if suites, ok := b.vector16(); !ok || len(suites) < 2 || len(suites)%2 != 0 {
		return "", malformed
	}
	if methods, ok := b.vector8(); !ok || len(methods) < 1 {
		return "", malformed
	}
	if len(b) == 0 {
		return "", errors.New("the TLS ClientHello names no server (no extensions)")
	}
	exts, ok := b.vector16()
	if !ok || len(b) != 0 {
		return "", malformed
	}
	seen := map[uint16]bool{}
	name := ""
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vector16()
		if !ok1 || !ok2 || seen[typ] {
			return "", malformed
		}
		seen[typ] = true
		switch typ {
		case extEncryptedHello:
			return "", errors.New("the TLS ClientHello is encrypted (ECH): the server it reaches cannot be checked")
		case extServerName:
			n, err := hostName(data)
			if err != nil {
				return "", err
			}
			name = n
		}
	}
	if name == "" {
		return "", errors.New("the TLS ClientHello names no server (SNI)")
	}
	return name, nil
}

// hostName reads a server_name extension's one host_name (RFC 6066 section 3).
func hostName(data bytesReader) (string, error) {
	malformed := errors.New("the TLS ClientHello's server name is malformed")
	list, ok := data.vector16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", malformed
	}
	name := ""
	for len(list) > 0 {
		typ, ok1 := list.u8()
		n, ok2 := list.vector16()
		if !ok1 || !ok2 || len(n) == 0 {
			return "", malformed
		}
		if typ != serverNameHost {
			continue
		}
		if name != "" {
			return "", errors.New("the TLS ClientHello names two servers")
		}
		name = strings.ToLower(string(n))
		if !validName(strings.TrimSuffix(name, ".")) {
			return "", fmt.Errorf("the TLS ClientHello's server name %q is not a host name", clip.Text(name, maxRecordText))
		}
	}
	return name, nil
}

// bytesReader reads a TLS structure, bounds checked: every read reports whether the bytes
// were there.
type bytesReader []byte

func (b *bytesReader) take(n int) (bytesReader, bool) {
	if n < 0 || len(*b) < n {
		return nil, false
	}
	out := (*b)[:n:n]
	*b = (*b)[n:]
	return out, true
}

func (b *bytesReader) u8() (uint8, bool) {
	v, ok := b.take(1)
	if !ok {
		return 0, false
	}
	return v[0], true
}

func (b *bytesReader) u16() (uint16, bool) {
	v, ok := b.take(2)
	if !ok {
		return 0, false
	}
	return uint16(v[0])<<8 | uint16(v[1]), true
}

func (b *bytesReader) vector8() (bytesReader, bool) {
	n, ok := b.u8()
	if !ok {
		return nil, false
	}
	return b.take(int(n))
}

func (b *bytesReader) vector16() (bytesReader, bool) {
	n, ok := b.u16()
	if !ok {
		return nil, false
	}
	return b.take(int(n))
}

// unrecognizedName is a TLS alert record: the client's TLS says why the tunnel closed.
var unrecognizedName = []byte{recordAlert, 3, 1, 0, 2, alertLevelFatal, alertUnrecognized}
