package session_test

import (
	"context"
	"testing"

	"github.com/logbook/logbook/session"
)

// The channels with a setting are those whose newest change of it has one of the values asked
// for: a channel that turned it off, or reset it, is not among them.
func TestChannelsWithSetting(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	set := func(channel, value string, isSet bool) {
		t.Helper()
		if _, err := st.SetChannelSetting(ctx, session.ChannelSetting{Team: "T1", Channel: channel, Name: "review_on", New: value, Set: isSet, SetBy: "U1"}); err != nil {
			t.Fatal(err)
		}
	}
	set("C0001", "auto", true)
	set("C0002", "request", true)
	set("C0003", "auto", true)
	set("C0003", "off", true)
	set("C0004", "auto", true)
	set("C0004", "", false)
	got, err := st.ChannelsWithSetting(ctx, "review_on", []string{"auto", "request"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Channel+"="+c.New)
	}
	if len(names) != 2 || names[0] != "C0001=auto" || names[1] != "C0002=request" {
		t.Fatalf("channels %v", names)
	}
}
