// Package forge talks to the forge that hosts a channel's repository — GitHub's REST API —
// on logbook's side, never the sandbox's: the token stays in logbook's process. It opens pull
// requests and finds the one already open for a branch, so that a retried or replayed
// create_pull_request never opens a second one.
package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/logbook/logbook/session/clip"
)

// DefaultAPIURL is GitHub's REST API.
const DefaultAPIURL = "https://api.github.com"

// GitHub is a client of GitHub's REST API (or GitHub Enterprise's, at another base URL).
type GitHub struct {
	base  string
	token string
	http  *http.Client
	cache *etagCache

	mu   sync.Mutex
	rate Rate // the latest answer's (conditional.go)
}

// NewGitHub returns a client of the API at base ("" for DefaultAPIURL) that authenticates with
// token (GITHUB_TOKEN, or a GitHub App installation token). hc nil: a client with a 30 s
// timeout.
func NewGitHub(base, token string, hc *http.Client) *GitHub {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	if base == "" {
		base = DefaultAPIURL
	}
	return &GitHub{base: strings.TrimRight(base, "/"), token: token, http: hc, cache: newETagCache(cacheBytes)}
}

// Repo is a repository: owner/name, and the branch pull requests go into.
type Repo struct {
	Owner, Name, Base string
}

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// ParseRepo reads "owner/name" or "owner/name@branch" (default branch "main").
func ParseRepo(s string) (Repo, error) {
	full, base, at := strings.Cut(strings.TrimSpace(s), "@")
	owner, name, ok := strings.Cut(full, "/")
	if !ok || !validName(owner) || !validName(name) || (at && !validBranch(base)) {
		return Repo{}, fmt.Errorf("%q: want owner/name or owner/name@branch", s)
	}
	if base == "" {
		base = "main"
	}
	return Repo{Owner: owner, Name: name, Base: base}, nil
}

func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// validBranch accepts what git check-ref-format accepts for a branch, more or less: no spaces,
// control characters, "..", "~^:?*[\", no leading "-" or trailing "/" or ".lock" — and none
// of "<>|!&`'\"$;" either: a branch name is shown in Slack and GitHub and passed to git, and
// the model picks it, so nothing in it may be markup or shell.
func validBranch(s string) bool {
	if s == "" || s == "HEAD" || len(s) > 250 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".lock") || strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("~^:?*[\\<>|!&`'\"$;", r) {
			return false
		}
	}
	return true
}

// ValidBranch reports whether s can name a branch.
func ValidBranch(s string) bool { return validBranch(s) }

// Pull is a pull request.
type Pull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	State   string `json:"state"`
	Head    struct {
		Ref string `json:"ref"`
	} `json:"head"`
}

// Error is an answer of the API that is not a success.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("GitHub answered HTTP %d: %s", e.Status, e.Message)
}

// FindPull returns the open pull request from branch of repo (nil when none: a closed one
// does not keep a reused branch name from getting a new one).
func (g *GitHub) FindPull(ctx context.Context, repo Repo, branch string) (*Pull, error) {
	q := url.Values{"head": {repo.Owner + ":" + branch}, "state": {"open"}, "per_page": {"1"}}
	var pulls []Pull
	if err := g.do(ctx, http.MethodGet, "/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name)+"/pulls?"+q.Encode(), nil, &pulls); err != nil {
		return nil, err
	}
	if len(pulls) == 0 {
		return nil, nil
	}
	return &pulls[0], nil
}

// CreatePull opens a pull request from branch into repo.Base.
func (g *GitHub) CreatePull(ctx context.Context, repo Repo, branch, title, body string) (*Pull, error) {
	in := map[string]any{"title": title, "head": branch, "base": repo.Base, "body": body}
	var p Pull
	if err := g.do(ctx, http.MethodPost, "/repos/"+url.PathEscape(repo.Owner)+"/"+url.PathEscape(repo.Name)+"/pulls", in, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (g *GitHub) do(ctx context.Context, method, path string, in, out any) error {
	_, err := g.doPage(ctx, method, path, in, out)
	return err
}

// doPage is do, also returning the path of the answer's next page (its Link header's
// rel="next", under the API's base; "": the last page).
func (g *GitHub) doPage(ctx context.Context, method, path string, in, out any) (string, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return "", err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("User-Agent", "logbook")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A GET is conditional on the answer kept for its URL (conditional.go).
	var kept *cached
	if method == http.MethodGet {
		if kept = g.cache.get(req.URL.String()); kept != nil {
			req.Header.Set("If-None-Match", kept.etag)
		}
	}
	resp, err := g.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return "", fmt.Errorf("GitHub did not answer: %w", ue.Err)
		}
		return "", fmt.Errorf("GitHub did not answer: %w", err)
	}
	defer resp.Body.Close()
	rate, rateKnown := readRate(resp.Header)
	if rateKnown {
		g.mu.Lock()
		g.rate = rate
		g.mu.Unlock()
	}
	if resp.StatusCode == http.StatusNotModified && kept != nil {
		if err := json.Unmarshal(kept.body, out); err != nil {
			return "", fmt.Errorf("GitHub's answer is not what the API documents: %w", err)
		}
		return kept.next, nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", fmt.Errorf("read GitHub's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
			// An error is an object with a message, or (a review's 422: "Line could not be
			// resolved") a string.
			Errors []json.RawMessage `json:"errors"`
		}
		_ = json.Unmarshal(data, &e)
		msg := e.Message
		for _, raw := range e.Errors {
			var x struct {
				Message string `json:"message"`
			}
			var text string
			if json.Unmarshal(raw, &text) == nil && text != "" {
				msg += "; " + text
			} else if json.Unmarshal(raw, &x) == nil && x.Message != "" {
				msg += "; " + x.Message
			}
		}
		msg = clip.Text(msg, 300)
		if rl := rateLimited(resp.StatusCode, resp.Header, rate, rateKnown, msg); rl != nil {
			return "", rl
		}
		return "", &Error{Status: resp.StatusCode, Message: msg}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return "", fmt.Errorf("GitHub's answer is not what the API documents: %w", err)
	}
	next := g.nextPage(resp.Header.Get("Link"))
	if method == http.MethodGet {
		g.cache.put(req.URL.String(), resp.Header.Get("ETag"), next, data)
	}
	return next, nil
}

// linkNextRE is a Link header's rel="next" target.
var linkNextRE = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// nextPage is the path of a Link header's next page ("": none, or one not under the API's
// base, which is never followed: the token goes only to GitHub's API).
func (g *GitHub) nextPage(link string) string {
	m := linkNextRE.FindStringSubmatch(link)
	if m == nil {
		return ""
	}
	path, ok := strings.CutPrefix(m[1], g.base)
	if !ok || !strings.HasPrefix(path, "/") {
		return ""
	}
	return path
}

// maxListPages bounds the pages of one list read (100 items a page).
const maxListPages = 30

// getAll reads every page of a list at path (with per_page), following the Link header's
// rel="next" as GitHub paginates; more than maxListPages pages is an error, never a partial
// answer.
func getAll[T any](ctx context.Context, g *GitHub, path string) ([]T, error) {
	var all []T
	for page := 0; path != ""; page++ {
		if page == maxListPages {
			return nil, fmt.Errorf("more than %d pages of %s", maxListPages, path)
		}
		var out []T
		next, err := g.doPage(ctx, http.MethodGet, path, nil, &out)
		if err != nil {
			return nil, err
		}
		all = append(all, out...)
		path = next
	}
	return all, nil
}
