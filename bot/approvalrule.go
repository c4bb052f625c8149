package bot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/logbook/logbook/bot/mrkdwn"
)

// The options of an ask rule that separate duties (issue 52). In LOGBOOK_TOOL_APPROVAL and a
// channel's approvals setting they follow ask, separated by spaces:
//
//	policy  = entry { "," entry }
//	entry   = [ channel "/" ] tool "=" mode
//	mode    = "allow" | "deny" | "ask" { " " option }
//	option  = "approvers:" count        two or more different people must approve (1..10)
//	        | "not_requester"           the person whose message started the turn may not approve (they may deny)
//	        | "approvers_in:" usergroup only members of this Slack user group (S…) may decide
//
// e.g. run_command=ask approvers:2 not_requester,write_file=ask approvers_in:S0123ABCD,*=allow.
// A space may follow the colon ("approvers: 2").
const (
	optApprovers    = "approvers"
	optNotRequester = "not_requester"
	optApproversIn  = "approvers_in"
	maxApprovers    = 10
)

// Rule is one entry of an approvals policy: the mode and, for ask, who must decide.
type Rule struct {
	Mode         string
	Approvers    int    // different people who must approve (0 or 1: one)
	NotRequester bool   // the requester may not approve (they may deny)
	ApproversIn  string // a Slack user group id; "" anyone Approvers permits
	// Text is the entry as the policy has it, canonical ("C0123ABCD/run_command=ask
	// approvers:2"): what a grant is scoped to. "" when no entry matched.
	Text string
}

// parseMode reads the part of an entry after "=".
func parseMode(s string) (Rule, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return Rule{}, errors.New("want tool=allow|ask|deny (tool a tool's name or *, optionally CHANNEL/ before it)")
	}
	r := Rule{Mode: strings.ToLower(f[0])}
	switch r.Mode {
	case ApprovalAllow, ApprovalDeny:
		if len(f) > 1 {
			return Rule{}, fmt.Errorf("only ask takes options (%s); %s takes none", strings.Join(f[1:], " "), r.Mode)
		}
		return r, nil
	case ApprovalAsk:
	default:
		return Rule{}, errors.New("want tool=allow|ask|deny (tool a tool's name or *, optionally CHANNEL/ before it)")
	}
	seen := map[string]bool{}
	for i := 1; i < len(f); i++ {
		name, value, hasValue := strings.Cut(f[i], ":")
		if hasValue && value == "" && i+1 < len(f) {
			i++
			value = f[i] // "approvers: 2"
		}
		if seen[name] {
			return Rule{}, fmt.Errorf("%s is given twice", name)
		}
		seen[name] = true
		switch name {
		case optApprovers:
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > maxApprovers {
				return Rule{}, fmt.Errorf("approvers:%s: want a count of different people, 1 to %d", value, maxApprovers)
			}
			r.Approvers = n
		case optNotRequester:
			if hasValue {
				return Rule{}, errors.New("not_requester takes no value")
			}
			r.NotRequester = true
		case optApproversIn:
			if !userGroupID(value) {
				return Rule{}, fmt.Errorf("approvers_in:%s: want a Slack user group id (e.g. S0123ABCD)", value)
			}
			r.ApproversIn = value
		default:
			return Rule{}, fmt.Errorf("ask has no option %q (options: approvers:N, not_requester, approvers_in:<user group id>)", f[i])
		}
	}
	return r, nil
}

// options is the mode as the canonical text writes it: "ask approvers:2 not_requester".
func (r Rule) options() string {
	out := []string{r.Mode}
	if r.Approvers > 1 {
		out = append(out, optApprovers+":"+strconv.Itoa(r.Approvers))
	}
	if r.NotRequester {
		out = append(out, optNotRequester)
	}
	if r.ApproversIn != "" {
		out = append(out, optApproversIn+":"+r.ApproversIn)
	}
	return strings.Join(out, " ")
}

// userGroupID reports whether s looks like a Slack user group id: S and upper-case letters
// and digits.
func userGroupID(s string) bool {
	if len(s) < 2 || len(s) > 24 || s[0] != 'S' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !(s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
			return false
		}
	}
	return true
}

// duties is what a request's rule asks of its approvers beyond Approvers, for the card: ""
// for a plain ask. A user group is named by its id in code, never as a mention (nobody is
// pinged by a card).
func duties(needed int, notRequester bool, group, requester string) string {
	var parts []string
	if needed > 1 {
		parts = append(parts, fmt.Sprintf("%d different people must approve", needed))
	}
	if group != "" {
		parts = append(parts, "only members of the user group `"+mrkdwn.EscapeText(group)+"` may decide")
	}
	if notRequester && requester != "" {
		parts = append(parts, "<@"+requester+">, who asked, may deny but not approve")
	} else if notRequester {
		parts = append(parts, "the person who asked may deny but not approve")
	}
	return strings.Join(parts, "; ")
}
