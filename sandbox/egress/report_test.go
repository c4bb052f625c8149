package egress

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// sideband wraps pkt-lines in band-1 packets of at most n bytes, with a progress packet
// first, as receive-pack sends them with side-band-64k.
func sideband(report string, n int) string {
	out := pkt("\x02remote: resolving deltas\n")
	for b := report; len(b) > 0; {
		k := min(n, len(b))
		out += pkt("\x01" + b[:k])
		b = b[k:]
	}
	return out + "0000"
}

// The report is read with and without side-band, report-status and -v2: only refs reported
// "ok" are pushed; anything the proxy cannot read whole confirms nothing.
func TestPushReport(t *testing.T) {
	cmds := func(caps string) []command {
		return []command{{ref: "refs/heads/a", caps: caps}, {ref: "refs/heads/b"}}
	}
	both := pkt("unpack ok\n") + pkt("ok refs/heads/a\n") + pkt("ok refs/heads/b\n") + "0000"
	half := pkt("unpack ok\n") + pkt("ok refs/heads/a\n") + pkt("ng refs/heads/b hook declined\n") + "0000"
	cases := []struct {
		name, caps, answer string
		status             int
		allowed            bool
		pushed             []string
		reason             string
	}{
		{"plain", "report-status", both, 200, true, []string{"refs/heads/a", "refs/heads/b"}, "git-receive-pack"},
		{"plain, in part", "report-status", half, 200, true, []string{"refs/heads/a"}, "git-receive-pack, in part: refs/heads/b refused by the repository: hook declined"},
		{"side-band-64k", "report-status side-band-64k", sideband(half, 7), 200, true, []string{"refs/heads/a"}, "in part: refs/heads/b refused"},
		{"side-band", "report-status side-band", sideband(both, 1000), 200, true, []string{"refs/heads/a", "refs/heads/b"}, "git-receive-pack"},
		{"v2 options", "report-status-v2 side-band-64k", sideband(pkt("unpack ok\n")+pkt("ok refs/heads/a\n")+pkt("option old-oid 1\n")+pkt("option new-oid 2\n")+
			pkt("option forced-update\n")+pkt("ok refs/heads/b\n")+"0000", 100), 200, true, []string{"refs/heads/a", "refs/heads/b"}, "git-receive-pack"},
		{"v2 renamed", "report-status-v2", pkt("unpack ok\n") + pkt("ok refs/heads/a\n") + pkt("option refname refs/heads/main\n") + pkt("ok refs/heads/b\n") + "0000",
			200, true, []string{"refs/heads/b"}, "refs/heads/a refused by the repository: updated as refs/heads/main instead"},
		{"all refused", "report-status", pkt("unpack ok\n") + pkt("ng refs/heads/a failed to update ref\n") + pkt("ng refs/heads/b\n") + "0000",
			200, false, nil, "push refused: refs/heads/a refused by the repository: failed to update ref; refs/heads/b refused by the repository: refused"},
		{"one unreported", "report-status", pkt("unpack ok\n") + pkt("ok refs/heads/a\n") + "0000", 200, true, []string{"refs/heads/a"}, "refs/heads/b not in the repository's report"},
		{"unpack failed", "report-status", pkt("unpack index-pack abnormal exit\n") + pkt("ok refs/heads/a\n") + pkt("ok refs/heads/b\n") + "0000", 200, false, nil, "could not unpack it: index-pack abnormal exit"},
		{"HTTP 500", "report-status", both, 500, false, nil, "answered HTTP 500"},
		{"cut short", "report-status", strings.TrimSuffix(both, "0000"), 200, false, nil, "ends before its report"},
		{"side-band cut short", "report-status side-band-64k", strings.TrimSuffix(sideband(both, 9), pkt("\x01"+"0000")+"0000"), 200, false, nil, "ends before its report"},
		{"side-band expected, not sent", "report-status side-band-64k", both, 200, false, nil, "cannot be read"},
		{"fatal band", "report-status side-band-64k", pkt("\x01"+pkt("unpack ok\n")+pkt("ok refs/heads/a\n")) + pkt("\x03oops\n") + "0000", 200, false, nil, "the repository's error: oops"},
		{"a ref not pushed", "report-status", pkt("unpack ok\n") + pkt("ok refs/heads/main\n") + "0000", 200, false, nil, `names "refs/heads/main"`},
		{"twice", "report-status", pkt("unpack ok\n") + pkt("ng refs/heads/a x\n") + pkt("ok refs/heads/a\n") + "0000", 200, false, nil, "or twice"},
		{"option first", "report-status-v2", pkt("unpack ok\n") + pkt("option refname refs/heads/a\n") + "0000", 200, false, nil, "option where none belongs"},
		{"not unpack", "report-status", pkt("ok refs/heads/a\n") + "0000", 200, false, nil, "not unpack"},
		{"garbage", "report-status", "HTTP/1.1 200 OK\r\n", 200, false, nil, "not in pkt-line format"},
		{"special pkt", "report-status", "0001", 200, false, nil, "special pkt-line"},
		{"ERR", "report-status", pkt("ERR denied\n"), 200, false, nil, "not unpack"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newPushReport(cmds(c.caps))
			// Byte by byte: the report is read whatever the reads' sizes.
			for i := range len(c.answer) {
				if n, err := r.Write([]byte{c.answer[i]}); n != 1 || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			allowed, reason, pushed := r.outcome(c.status)
			if allowed != c.allowed || !slices.Equal(pushed, c.pushed) || !strings.Contains(reason, c.reason) {
				t.Errorf("outcome: %v %q %q; want %v, %q, reason with %q", allowed, reason, pushed, c.allowed, c.pushed, c.reason)
			}
		})
	}
}

// An answer over its bound is not read further and confirms nothing.
func TestPushReportBounded(t *testing.T) {
	r := newPushReport([]command{{ref: "refs/heads/a", caps: "report-status side-band-64k"}})
	progress := []byte(pkt("\x02" + strings.Repeat("x", 60000)))
	for range maxReportBytes/len(progress) + 2 {
		_, _ = r.Write(progress)
	}
	_, _ = r.Write([]byte(sideband(pkt("unpack ok\n")+pkt("ok refs/heads/a\n")+"0000", 100)))
	if allowed, reason, pushed := r.outcome(200); allowed || pushed != nil || !strings.Contains(reason, fmt.Sprintf("over %d bytes", maxReportBytes)) {
		t.Errorf("outcome: %v %q %q", allowed, reason, pushed)
	}
}

// The refs advertisement is read with or without smart HTTP's preamble, an empty
// repository's included; one that cannot be read makes the push refused, not let through.
func TestAdvertisedRefs(t *testing.T) {
	zero := strings.Repeat("0", 40)
	one := "1" + zero[1:]
	want := map[string]string{"refs/heads/logbook/a": "logbook/a", "refs/heads/logbook/b": "logbook/b"}
	refs := pkt(one+" refs/heads/main\x00report-status side-band-64k\n") + pkt(one+" refs/heads/logbook/a\n") + "0000"
	for _, c := range []struct {
		name, body string
		status     int
		exists     []string
		err        string
	}{
		{"smart HTTP", pkt("# service=git-receive-pack\n") + "0000" + refs, 200, []string{"refs/heads/logbook/a"}, ""},
		{"no preamble", refs, 200, []string{"refs/heads/logbook/a"}, ""},
		{"empty repository", pkt("# service=git-receive-pack\n") + "0000" + pkt(zero+" capabilities^{}\x00report-status\n") + "0000", 200, nil, ""},
		{"cut short", pkt("# service=git-receive-pack\n") + "0000" + pkt(one+" refs/heads/main\n"), 200, nil, "cut short"},
		{"no flush after the preamble", pkt("# service=git-receive-pack\n") + refs, 200, nil, "no flush after its preamble"},
		{"not pkt-lines", "<html>", 200, nil, "not in pkt-line format"},
		{"HTTP 500", refs, 500, nil, "answered HTTP 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/r.git/info/refs" || r.URL.RawQuery != "service=git-receive-pack" || r.Header.Get("Authorization") != "Basic c2VrcmV0" {
					t.Errorf("asked %s %s", r.URL, r.Header)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			p := New(Options{Git: &Remote{URL: srv.URL + "/r.git", Header: "Authorization: Basic c2VrcmV0", BranchPrefix: "logbook/"}})
			defer p.Close()
			got, err := p.advertisedRefs(context.Background(), srv.URL+"/r.git", want)
			var names []string
			for ref := range got {
				names = append(names, ref)
			}
			if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) || !slices.Equal(names, c.exists) {
				t.Errorf("%q, %v; want %q, error with %q", names, err, c.exists, c.err)
			}
			cmds := []command{{old: zero, new: one, ref: "refs/heads/logbook/a"}}
			if err := p.allowCreates(context.Background(), srv.URL+"/r.git", cmds); err == nil && (c.err != "" || len(c.exists) > 0) {
				t.Errorf("a create of logbook/a was let through")
			}
		})
	}
}
