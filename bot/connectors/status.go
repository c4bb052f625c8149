package connectors

import (
	"context"

	"github.com/rs/zerolog"
)

// Status is what /logbook mcp says of one server offered in a channel.
type Status struct {
	Server    string
	Transport string
	// Checked says Reachable was tried: remote servers are connected to and listed; local
	// ones run in a thread's sandbox and are started only there, on first use.
	Checked   bool
	Reachable bool
	Error     string // why not reachable, secrets scrubbed
	Tools     []Tool // the tools offered, when reachable
}

// Check connects to each remote server offered in the channel, lists its tools and closes
// the connection again; local servers are named, not started.
func (c *Connectors) Check(ctx context.Context, channelID, channelName string, log zerolog.Logger) []Status {
	s := c.Session(channelID, channelName, nil, log)
	defer s.Close()
	var out []Status
	for _, srv := range s.servers {
		st := Status{Server: srv.Name, Transport: srv.Transport}
		if srv.Remote() {
			st.Checked = true
			tools, err := s.toolsOf(ctx, srv)
			if err != nil {
				st.Error = clipText(c.redact(err.Error()), 300)
			} else {
				st.Reachable, st.Tools = true, tools
			}
		}
		out = append(out, st)
	}
	return out
}
