package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// clientHello returns the first TLS records crypto/tls's client sends with cfg.
func clientHello(tb testing.TB, cfg *tls.Config) []byte {
	tb.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(c, cfg).Handshake()
	}()
	raw, _, err := readClientHello(s)
	s.Close()
	<-done
	c.Close()
	if err != nil {
		tb.Fatalf("read crypto/tls's ClientHello: %v", err)
	}
	return raw
}

// records cuts a ClientHello's handshake message into TLS records of at most n bytes.
func inRecords(raw []byte, n int) []byte {
	msg := bytes.Buffer{}
	for b := raw; len(b) >= 5; {
		size := int(b[3])<<8 | int(b[4])
		msg.Write(b[5 : 5+size])
		b = b[5+size:]
	}
	var out []byte
	for m := msg.Bytes(); len(m) > 0; {
		k := min(n, len(m))
		out = append(out, recordHandshake, 3, 1, byte(k>>8), byte(k))
		out = append(out, m[:k]...)
		m = m[k:]
	}
	return out
}

// withExtension returns a one-record ClientHello with extension typ (data) added at the end.
func withExtension(tb testing.TB, raw []byte, typ uint16, data []byte) []byte {
	tb.Helper()
	_, hello, err := readClientHello(bytes.NewReader(raw))
	if err != nil {
		tb.Fatal(err)
	}
	hello = append([]byte(nil), hello...)
	// The extensions' length is the last vector's: find it by walking the fixed part.
	at := 2 + 32
	at += 1 + int(hello[at])
	at += 2 + (int(hello[at])<<8 | int(hello[at+1]))
	at += 1 + int(hello[at])
	extLen := int(hello[at])<<8 | int(hello[at+1]) + 4 + len(data)
	hello[at], hello[at+1] = byte(extLen>>8), byte(extLen)
	hello = append(hello, byte(typ>>8), byte(typ), byte(len(data)>>8), byte(len(data)))
	hello = append(hello, data...)
	msg := append([]byte{handshakeHello, byte(len(hello) >> 16), byte(len(hello) >> 8), byte(len(hello))}, hello...)
	return append([]byte{recordHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

func sniData(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, serverNameHost, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
}

func helloName(raw []byte) (string, error) {
	_, hello, err := readClientHello(bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	return serverName(hello)
}

func TestServerName(t *testing.T) {
	named := clientHello(t, &tls.Config{ServerName: "Registry.NPMjs.org", NextProtos: []string{"h2", "http/1.1"}})
	tls12 := clientHello(t, &tls.Config{ServerName: "github.com", MaxVersion: tls.VersionTLS12})
	unnamed := clientHello(t, &tls.Config{InsecureSkipVerify: true})
	for _, c := range []struct {
		name string
		raw  []byte
		want string // "" : refused, with err containing wantErr
		err  string
	}{
		{"crypto/tls", named, "registry.npmjs.org", ""},
		{"TLS 1.2", tls12, "github.com", ""},
		{"over many records", inRecords(named, 50), "registry.npmjs.org", ""},
		{"no SNI", unnamed, "", "names no server"},
		{"SNI added", withExtension(t, unnamed, extServerName, sniData("example.com")), "example.com", ""},
		{"SNI twice", withExtension(t, named, extServerName, sniData("example.com")), "", "malformed"},
		{"two host names", withExtension(t, unnamed, extServerName, sniData("a.example", "b.example")), "", "names two servers"},
		{"not a host name", withExtension(t, unnamed, extServerName, sniData("a b")), "", "not a host name"},
		{"empty name", withExtension(t, unnamed, extServerName, sniData("")), "", "malformed"},
		{"ECH", withExtension(t, named, extEncryptedHello, []byte{0, 1, 2}), "", "encrypted (ECH)"},
		{"bad extension length", withExtension(t, unnamed, 0x1234, nil)[:len(unnamed)+3], "", "cut short"},
		{"http", []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), "", "does not start with a TLS ClientHello"},
		{"not a hello", []byte{recordHandshake, 3, 1, 0, 4, 2, 0, 0, 0}, "", "does not start with a TLS ClientHello"},
		{"an empty record", []byte{recordHandshake, 3, 1, 0, 0}, "", "a TLS record of 0 bytes"},
		{"a record too large", []byte{recordHandshake, 3, 1, 0x40, 1}, "", "a TLS record of 16385 bytes"},
		{"a hello too large", []byte{recordHandshake, 3, 1, 0, 4, handshakeHello, 1, 0, 0}, "", "is over 32768 bytes"},
		{"more than the hello", append(append([]byte{}, named[:3]...), append([]byte{byte((len(named) - 4) >> 8), byte(len(named) - 4)}, append(append([]byte{}, named[5:]...), 0)...)...), "", "holds more than the ClientHello"},
		{"nothing", nil, "", "closed before a TLS ClientHello"},
	} {
		got, err := helloName(c.raw)
		if got != c.want || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %q, %v; want %q, error with %q", c.name, got, err, c.want, c.err)
		}
	}
}

// The ClientHello parser takes any bytes without panicking, reads no more than a
// ClientHello's records, and returns only a host name.
func FuzzServerName(f *testing.F) {
	named := clientHello(f, &tls.Config{ServerName: "example.com", NextProtos: []string{"h2"}})
	f.Add(named)
	f.Add(inRecords(named, 7))
	f.Add(clientHello(f, &tls.Config{InsecureSkipVerify: true}))
	f.Add(withExtension(f, named, extEncryptedHello, []byte{1}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, hello, err := readClientHello(bytes.NewReader(in))
		if !bytes.HasPrefix(in, raw) || len(raw) > len(in) {
			t.Fatalf("read %d bytes that are not the input's first", len(raw))
		}
		if err != nil {
			return
		}
		if len(hello) > maxHelloBytes {
			t.Fatalf("a ClientHello of %d bytes", len(hello))
		}
		name, err := serverName(hello)
		if err == nil && (!validName(strings.TrimSuffix(name, ".")) || name != strings.ToLower(name)) {
			t.Fatalf("server name %q", name)
		}
	})
}

// nameResolver resolves every name to one address.
type nameResolver struct{ addr netip.Addr }

func (r nameResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{r.addr}, nil
}

// TestConnectChecksTheServerName: a tunnel to a name carries TLS whose ClientHello names that
// name. A real TLS client through the proxy reaches an allowed loopback TLS server by its
// name; the same tunnel asked to front another name (a different SNI, as through a shared
// CDN), no SNI, or no TLS at all is refused before a byte reaches the server, and recorded
// with the reason; so is one that sends nothing in time. A tunnel to an allowed address is
// not read (see checkHello). curl --connect-to fronts the same way and is refused too.
func TestConnectChecksTheServerName(t *testing.T) {
	var mu sync.Mutex
	var seen []string // the server names the TLS server was asked for
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls-ok") }))
	srv.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		seen = append(seen, h.ServerName)
		mu.Unlock()
		return nil, nil
	}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused tunnels' handshakes that never came
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	allow, err := ParseAllowlist("example.com:" + port + ",127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	records := make(chan Connection, 16)
	p := New(Options{Allow: allow, Record: func(c Connection) { records <- c }, Resolver: nameResolver{netip.MustParseAddr("127.0.0.1")},
		isPublic: func(netip.Addr) bool { return true }, helloTimeout: 200 * time.Millisecond})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	defer func() {
		p.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	proxyURL := "http://logbook:" + p.Secret() + "@" + l.Addr().String()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	// tunnel asks for target (with Host header host) and speaks TLS naming sni in it.
	tunnel := func(target, host string, send func(net.Conn) error) error {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // against a test that would hang
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, host,
			base64.StdEncoding.EncodeToString([]byte("logbook:"+p.Secret())))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
		return send(&bufConn{Conn: c, r: br})
	}
	get := func(sni string, skipVerify bool) func(net.Conn) error {
		return func(c net.Conn) error {
			tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots, InsecureSkipVerify: skipVerify})
			if err := tc.Handshake(); err != nil {
				return err
			}
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
			b, err := io.ReadAll(tc)
			if !strings.HasSuffix(string(b), "tls-ok") {
				return fmt.Errorf("the server answered %q (%v)", b, err)
			}
			return nil
		}
	}
	target := "example.com:" + port
	if err := tunnel(target, "elsewhere.test:"+port, get("example.com", false)); err != nil {
		t.Fatalf("TLS naming the tunnel's host (its Host header another): %v", err)
	}
	if c := <-records; !c.Allowed || c.Host != "example.com" || c.BytesIn == 0 {
		t.Errorf("record of the allowed tunnel: %+v", c)
	}
	for _, c := range []struct {
		name string
		send func(net.Conn) error
		why  string
	}{
		{"fronting", get("other.example", true), "tunnel refused: the TLS ClientHello names other.example, not example.com"},
		{"no SNI", get("", true), "tunnel refused: the TLS ClientHello names no server (SNI)"},
		{"no TLS", func(c net.Conn) error {
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
			return closed(c)
		}, "tunnel refused: the tunnel does not start with a TLS ClientHello"},
		{"nothing sent", closed, "tunnel refused: no whole TLS ClientHello came in time"},
	} {
		err := tunnel(target, target, c.send)
		if err == nil {
			t.Errorf("%s: the tunnel carried it", c.name)
		}
		if r := <-records; r.Allowed || r.Reason != c.why && !strings.HasPrefix(r.Reason, c.why) || r.BytesOut != 0 {
			t.Errorf("%s: record %+v; want refused: %s", c.name, r, c.why)
		}
		if c.name == "fronting" && (err == nil || !strings.Contains(err.Error(), "unrecognized name")) {
			t.Errorf("fronting: the client heard %v, not the alert", err)
		}
	}
	// By address, the tunnel is not read.
	if err := tunnel("127.0.0.1:"+port, "127.0.0.1:"+port, get("other.example", true)); err != nil {
		t.Errorf("a tunnel to an allowed address: %v", err)
	}
	<-records

	if curl, err := exec.LookPath("curl"); err == nil {
		// curl asks the proxy for example.com, and names other.example inside.
		out, err := exec.Command(curl, "-s", "-k", "-p", "-x", proxyURL, "--connect-to", "other.example:"+port+":example.com:"+port,
			"-o", "/dev/null", "-w", "%{http_connect} %{http_code}", "https://other.example:"+port+"/").Output()
		if err == nil || string(out) != "200 000" {
			t.Errorf("curl fronting: %q, %v", out, err)
		}
		if r := <-records; r.Allowed || !strings.Contains(r.Reason, "names other.example, not example.com") {
			t.Errorf("curl fronting: record %+v", r)
		}
	} else {
		t.Error("curl is needed (apt-get install curl); .ci/run installs it")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "example.com,other.example" {
		t.Errorf("the TLS server was asked for %q; want only the allowed tunnel's and the address's", seen)
	}
}

// closed reads c to its end: an error when it closed with nothing but, maybe, the proxy's
// alert; nil when something answered.
func closed(c net.Conn) error {
	if b, _ := io.ReadAll(c); len(b) > 0 && !bytes.Equal(b, unrecognizedName) {
		return nil
	}
	return io.EOF
}

// bufConn reads through the reader that read the CONNECT answer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
