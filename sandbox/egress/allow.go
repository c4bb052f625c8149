// Package egress is a sandbox's only way out: an HTTP proxy that logbook runs outside the
// sandbox (reached from inside through a Unix socket bound into a bwrap sandbox, or a
// loopback port for the process provider). It lets through only connections to the host:port
// patterns of an allowlist (LOGBOOK_SANDBOX_EGRESS), records every connection, allowed or
// refused, and serves the session's repository itself, adding the credentials upstream: the
// sandbox never holds them.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Allowlist is a parsed LOGBOOK_SANDBOX_EGRESS: host:port patterns. The zero value allows
// nothing.
type Allowlist struct {
	patterns []pattern
}

type pattern struct {
	host     string     // lower case, without the "*." of a wildcard
	wildcard bool       // "*.example.com": any subdomain, not the apex
	ip       netip.Addr // set when the pattern names an address
	port     int        // 0: any port ("*")
}

// ParseAllowlist reads a list of host:port patterns separated by commas or spaces:
// "github.com:443", "*.npmjs.org:443" (subdomains only), "registry.example.com:*" (any port),
// "10.0.0.7:8080" or "[::1]:9000" (an address, named exactly). A name never reaches a
// loopback, private or link-local address, whatever it resolves to; only a pattern naming
// the address itself does.
func ParseAllowlist(s string) (Allowlist, error) {
	var a Allowlist
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		host, port, err := net.SplitHostPort(f)
		if err != nil || host == "" {
			return Allowlist{}, fmt.Errorf("%q: want host:port, *.domain:port or host:*", f)
		}
		p := pattern{}
		if port != "*" {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return Allowlist{}, fmt.Errorf("%q: port %q is not 1-65535 or *", f, port)
			}
			p.port = n
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			p.ip = ip.Unmap()
		} else {
			host = strings.ToLower(strings.TrimSuffix(host, "."))
			if rest, ok := strings.CutPrefix(host, "*."); ok {
				p.wildcard, host = true, rest
			}
			if !validName(host) {
				return Allowlist{}, fmt.Errorf("%q: %q is not a host name (a wildcard is only a leading *.)", f, host)
			}
			p.host = host
		}
		a.patterns = append(a.patterns, p)
	}
	return a, nil
}

// String is the allowlist as ParseAllowlist reads it.
func (a Allowlist) String() string {
	out := make([]string, 0, len(a.patterns))
	for _, p := range a.patterns {
		host := p.host
		if p.ip.IsValid() {
			host = p.ip.String()
		} else if p.wildcard {
			host = "*." + host
		}
		port := "*"
		if p.port != 0 {
			port = strconv.Itoa(p.port)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return strings.Join(out, ",")
}

// Empty reports whether nothing is allowed.
func (a Allowlist) Empty() bool { return len(a.patterns) == 0 }

// NamesLoopback reports whether a pattern names a loopback address: through the proxy, a
// sandbox then reaches the host's own loopback services as a loopback caller.
func (a Allowlist) NamesLoopback() bool {
	for _, p := range a.patterns {
		if p.ip.IsValid() && p.ip.IsLoopback() {
			return true
		}
	}
	return false
}

func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// refusedError is why a connection was refused by the policy (not failed); its text is shown
// to the sandbox and recorded.
type refusedError struct{ why string }

func (e refusedError) Error() string { return e.why }

func refused(format string, args ...any) error { return refusedError{fmt.Sprintf(format, args...)} }

// allows checks host (a name or an address literal) and port against the patterns. byAddr
// says a pattern named the address itself, which is what lets a non-public address through.
func (a Allowlist) allows(host string, port int) (ok, byAddr bool) {
	ip, err := netip.ParseAddr(host)
	isIP := err == nil
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, p := range a.patterns {
		if p.port != 0 && p.port != port {
			continue
		}
		switch {
		case p.ip.IsValid():
			if isIP && p.ip == ip.Unmap() {
				return true, true
			}
		case isIP:
		case p.wildcard:
			if strings.HasSuffix(host, "."+p.host) {
				return true, false
			}
		case host == p.host:
			return true, false
		}
	}
	return false, false
}

// public reports whether ip is an address of the internet at large: not loopback, private,
// link-local (the cloud metadata service), unspecified, multicast, carrier-grade NAT or any
// other special-purpose range (RFC 6890); an IPv6 address carrying an IPv4 one (NAT64,
// 6to4, IPv4-compatible) is judged by the IPv4 address too.
func public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(ip) {
			return false
		}
	}
	if ip.Is6() {
		b := ip.As16()
		var v4 netip.Addr
		switch {
		case nat64.Contains(ip), nat64Local.Contains(ip), v4Compatible.Contains(ip):
			v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(ip):
			v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if v4.IsValid() && !public(v4) {
			return false
		}
	}
	return true
}

var (
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")
	v4Compatible = netip.MustParsePrefix("::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	// specialPurpose are the ranges no name of the internet should resolve to.
	specialPurpose = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("240.0.0.0/4"),
		netip.MustParsePrefix("fec0::/10"), netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("100::/64"),
	}
)

var errNoAddress = errors.New("no address")
