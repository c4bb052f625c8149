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
	// Failed is the last failure to start or reach the server from a thread of the channel on
	// this replica, when it has not been reached since (a local server's start error).
	Failed *Failure
}

// Check connects to each remote server offered in the channel, lists its tools and closes
// the connection again (what it finds is remembered as a thread's try is); local servers are
// named, not started, with their last start failure on this replica.
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
				st.Error = c.reason(srv, err)
				c.health.failed(srv.Name, channelID, st.Error, c.opts.Now(), c.opts.RetryAfter)
			} else {
				st.Reachable, st.Tools = true, tools
				c.health.ok(srv.Name, channelID)
			}
		}
		if f, ok := c.health.last(srv.Name, channelID); ok && !st.Reachable {
			st.Failed = &f
		}
		out = append(out, st)
	}
	return out
}
