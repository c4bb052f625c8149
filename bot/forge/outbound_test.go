package forge

import "testing"

// The model's text reaches GitHub inert: no @mention, however the @ is written, and no
// logbook marker (found by a security review: &#64;name slipped past the @ check).
func TestOutboundPingsNobody(t *testing.T) {
	for in, want := range map[string]string{
		"thanks @octocat":            "thanks @\u200bocto" + "cat",
		"cc &#64;octocat":            "cc &amp;#64;octocat",
		"cc &#064;octocat":           "cc &amp;#064;octocat",
		"cc &#x40;octocat":           "cc &amp;#x40;octocat",
		"cc &#X40;octocat":           "cc &amp;#X40;octocat",
		"cc &commat;octocat":         "cc &amp;commat;octocat",
		"a@b.example":                "a@\u200bb.example",
		"<!-- logbook-review head=x": "&lt;!-- logbook-review head=x",
		"AT&T, &amp; &#65;":          "AT&T, &amp; &#65;",
	} {
		if got := Outbound(in); got != want {
			t.Errorf("Outbound(%q) = %q, want %q", in, got, want)
		}
	}
}
