package mrkdwn

import "testing"

// A link from elsewhere never carries Slack markup out of its URL or text.
func TestLinkKeepsForeignURLsInert(t *testing.T) {
	for _, c := range []struct{ url, text, want string }{
		{"https://github.com/a/b/pull/1", "a/b#1", "<https://github.com/a/b/pull/1|a/b#1>"},
		{"https://github.com/a/b/pull/1?x=1&y=2", "a<b>", "<https://github.com/a/b/pull/1?x=1&amp;y=2|a&lt;b&gt;>"},
		{"https://x#r1> <!channel> <https://y", "review", "review"},
		{"https://x|<!here>", "review", "review"},
		{"http://x", "plain", "plain"},
		{"https://x", "<!channel>", "<https://x|&lt;!channel&gt;>"},
	} {
		if got := Link(c.url, c.text); got != c.want {
			t.Errorf("Link(%q, %q) = %q, want %q", c.url, c.text, got, c.want)
		}
	}
}
