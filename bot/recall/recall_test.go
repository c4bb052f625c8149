package recall

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// vis says a channel is shared, or cannot say.
type vis map[string]error

func (v vis) ChannelPrivate(context.Context, string) (bool, error) { return false, nil }
func (v vis) ChannelExtShared(_ context.Context, ch string) (bool, error) {
	err, ok := v[ch]
	return ok && err == nil, err
}

// A search from a shared channel, from a channel whose sharing cannot be learnt, or by a
// person of another organisation covers that channel alone; from an internal channel, every
// public one.
func TestScopeChannel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := vis{"CSHARED": nil, "CUNKNOWN": errors.New("conversations.info: ratelimited")}
	for _, c := range []struct {
		channel  string
		external bool
		want     string
	}{
		{"CINTERNAL", false, ""},
		{"CSHARED", false, "CSHARED"},
		{"CUNKNOWN", false, "CUNKNOWN"},
		{"CINTERNAL", true, "CINTERNAL"},
	} {
		if got := scopeChannel(ctx, v, c.channel, c.external); got != c.want {
			t.Errorf("scopeChannel(%s, external %v) = %q, want %q", c.channel, c.external, got, c.want)
		}
	}
	if got := scopeChannel(ctx, nil, "CSHARED", false); got != "" {
		t.Errorf("without a Visibility (tests only): %q", got)
	}
}
