package bot

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/logbook/logbook/session"
)

// FooterMode says what the small line under a final reply shows (LOGBOOK_REPLY_FOOTER).
type FooterMode string

// The footer modes.
const (
	FooterOff   FooterMode = "off"
	FooterLink  FooterMode = "link"  // a link to the session's web transcript
	FooterUsage FooterMode = "usage" // the link, the turn's tokens and, when priced, its cost
)

// ParseFooterMode parses a FooterMode; "" is link when the web pages have a public address,
// else off.
func ParseFooterMode(s string, publicURL string) (FooterMode, error) {
	switch m := FooterMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		if publicURL == "" {
			return FooterOff, nil
		}
		return FooterLink, nil
	case FooterOff, FooterLink, FooterUsage:
		if m != FooterOff && publicURL == "" {
			return "", fmt.Errorf("%q needs the web pages' public address (LOGBOOK_PUBLIC_URL)", s)
		}
		return m, nil
	}
	return "", fmt.Errorf("%q: want off, link or usage", s)
}

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	Input, Output float64
}

// Footer is the line under a final reply.
type Footer struct {
	Mode      FooterMode
	PublicURL string // the web pages' external address, e.g. https://logbook.example.com
	// Price is a model's price (false: none is known, and the footer shows tokens without
	// cost). Serve's is LOGBOOK_PRICES' (budget.Prices.For: the longest prefix that names the
	// model, so claude-sonnet-4 prices claude-sonnet-4-5-20250929).
	Price func(model string) (Price, bool)
}

// line is the footer for a reply of session id whose turn made the calls in usages ("" when
// off).
func (f Footer) line(id session.ID, usages []session.Usage) string {
	if f.Mode == "" || f.Mode == FooterOff || f.PublicURL == "" {
		return ""
	}
	parts := []string{"<" + TranscriptURL(f.PublicURL, id) + "|Transcript>"}
	if f.Mode == FooterUsage && len(usages) > 0 {
		var in, out int64
		var cost float64
		priced := true
		models := map[string]bool{}
		for _, u := range usages {
			in, out = in+u.InputTokens, out+u.OutputTokens
			models[u.Model] = true
			var p Price
			ok := f.Price != nil
			if ok {
				p, ok = f.Price(u.Model)
			}
			priced = priced && ok
			cost += (float64(u.InputTokens)*p.Input + float64(u.OutputTokens)*p.Output) / 1e6
		}
		names := make([]string, 0, len(models))
		for m := range models {
			names = append(names, m)
		}
		sort.Strings(names)
		parts = append(parts, strings.Join(names, ", "), fmt.Sprintf("%s in · %s out", thousands(in), thousands(out)))
		if priced {
			parts = append(parts, fmt.Sprintf("$%.4f", cost))
		}
	}
	return strings.Join(parts, " · ")
}

// TranscriptURL is the address of session id's web transcript under the pages' public
// address (LOGBOOK_PUBLIC_URL): what the footer and the Open transcript shortcut link to.
func TranscriptURL(publicURL string, id session.ID) string {
	return strings.TrimRight(publicURL, "/") + "/sessions/" + url.PathEscape(id.String())
}

// thousands writes n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// turnUsage collects the usage of every model call of the turn at turnSeq.
func turnUsage(evs []session.Event, turnSeq int64) []session.Usage {
	var out []session.Usage
	for _, e := range session.Select(evs, session.Range{From: turnSeq + 1, Types: []session.Type{session.TypeAssistantMessage}}) {
		var m session.AssistantMessage
		if e.Decode(&m) == nil && m.Usage != nil {
			out = append(out, *m.Usage)
		}
	}
	return out
}
