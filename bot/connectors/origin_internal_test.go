package connectors

import (
	"net/url"
	"testing"
)

// One origin however it is written: case, the scheme's default port; another port, scheme or
// host is another origin.
func TestOrigin(t *testing.T) {
	t.Parallel()
	same := "https://mcp.example.com"
	for raw, want := range map[string]string{
		"https://MCP.example.com/mcp":     same,
		"https://mcp.example.com:443/x":   same,
		"http://mcp.example.com:80/":      "http://mcp.example.com",
		"https://mcp.example.com:8443/":   "https://mcp.example.com:8443",
		"https://[::1]:8443/":             "https://[::1]:8443",
		"http://127.0.0.1:41163/messages": "http://127.0.0.1:41163",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := origin(u); got != want {
			t.Errorf("origin(%s) = %s, want %s", raw, got, want)
		}
	}
}
