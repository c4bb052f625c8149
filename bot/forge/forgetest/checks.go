package forgetest

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkState is what the fake knows of pull requests beyond opening them: heads, check runs,
// statuses, reviews and their comments.
type checkState struct {
	heads       map[string]string           // branch -> head SHA (SetHead; else Options.HeadSHA)
	runs        []map[string]any            // check runs, in creation order
	annotations map[int64][]map[string]any  // check run id -> its annotations
	statuses    map[string][]map[string]any // sha -> statuses, newest first
	reviews     map[int][]map[string]any    // pull number -> reviews
	comments    map[int][]map[string]any    // pull number -> review comments
	nextID      int64
	lookups     int // GET requests served for followed pull requests
}

func newCheckState() checkState {
	return checkState{heads: map[string]string{}, annotations: map[int64][]map[string]any{}, statuses: map[string][]map[string]any{},
		reviews: map[int][]map[string]any{}, comments: map[int][]map[string]any{}, nextID: 1000}
}

// Check is a check run to add: its name, status (default completed), conclusion, and output.
type Check struct {
	Name, Status, Conclusion string
	Title, Summary, Text     string
	Annotations              []Annotation
}

// Annotation is one annotation of a check run.
type Annotation struct {
	Path    string
	Line    int
	Level   string // notice, warning, failure (default failure)
	Message string
}

// Comment is one comment of a review, on a file and line.
type Comment struct {
	Path string
	Line int
	Body string
}

// Reviewer is who writes a review: a login, "User" or "Bot", and the author_association
// GitHub gives the account on the repository (default COLLABORATOR; a stranger's is NONE).
type Reviewer struct {
	Login, Type string
	Association string
}

// SetHead makes sha the head of branch (a push).
func (s *Server) SetHead(branch, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks.heads[branch] = sha
}

// Head is branch's head SHA.
func (s *Server) Head(branch string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head(branch)
}

func (s *Server) head(branch string) string {
	if sha, ok := s.checks.heads[branch]; ok {
		return sha
	}
	if s.opt.HeadSHA != nil {
		if sha := s.opt.HeadSHA(branch); sha != "" {
			return sha
		}
	}
	return strings.Repeat("0", 40)
}

// Lookups is how many GET requests about followed pull requests (checks, statuses, reviews,
// comments, annotations, a pull request) the fake answered.
func (s *Server) Lookups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks.lookups
}

// AddCheckRun adds a check run on sha and returns its id.
func (s *Server) AddCheckRun(sha string, c Check) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks.nextID++
	id := s.checks.nextID
	status := c.Status
	if status == "" {
		status = "completed"
	}
	var conclusion any
	if status == "completed" {
		conclusion = c.Conclusion
	}
	run := map[string]any{"id": id, "name": c.Name, "head_sha": sha, "status": status, "conclusion": conclusion,
		"html_url":    fmt.Sprintf("https://github.com/%s/runs/%d", s.opt.Repo, id),
		"details_url": fmt.Sprintf("https://ci.example/%s/runs/%d", s.opt.Repo, id),
		"app":         map[string]any{"slug": "github-actions"},
		"output":      map[string]any{"title": c.Title, "summary": c.Summary, "text": c.Text, "annotations_count": len(c.Annotations)},
		"check_suite": map[string]any{"id": id + 5000}}
	s.checks.runs = append(s.checks.runs, run)
	for _, a := range c.Annotations {
		level := a.Level
		if level == "" {
			level = "failure"
		}
		s.checks.annotations[id] = append(s.checks.annotations[id], map[string]any{"path": a.Path, "start_line": a.Line, "end_line": a.Line,
			"annotation_level": level, "title": "", "message": a.Message, "raw_details": ""})
	}
	return id
}

// SetStatus sets the commit status of context on sha.
func (s *Server) SetStatus(sha, context, state, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks.nextID++
	st := map[string]any{"id": s.checks.nextID, "context": context, "state": state, "description": description,
		"target_url": "https://ci.example/status/" + strconv.FormatInt(s.checks.nextID, 10)}
	s.checks.statuses[sha] = append([]map[string]any{st}, s.checks.statuses[sha]...)
}

// AddReview submits a review of pull request number on its head, with comments, and returns
// the review's id and its comments' ids.
func (s *Server) AddReview(number int, by Reviewer, state, body string, comments ...Comment) (int64, []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	branch := s.branchOf(number)
	s.checks.nextID++
	id := s.checks.nextID
	user := map[string]any{"login": by.Login, "type": by.Type}
	assoc := by.Association
	if assoc == "" {
		assoc = "COLLABORATOR"
	}
	s.checks.reviews[number] = append(s.checks.reviews[number], map[string]any{"id": id, "user": user, "state": state, "body": body,
		"author_association": assoc,
		"commit_id":          s.head(branch), "html_url": fmt.Sprintf("https://github.com/%s/pull/%d#pullrequestreview-%d", s.opt.Repo, number, id),
		"submitted_at": time.Now().UTC().Format(time.RFC3339)})
	var ids []int64
	for _, c := range comments {
		s.checks.nextID++
		ids = append(ids, s.checks.nextID)
		s.checks.comments[number] = append(s.checks.comments[number], map[string]any{"id": s.checks.nextID, "pull_request_review_id": id,
			"user": user, "author_association": assoc, "path": c.Path, "line": c.Line, "original_line": c.Line, "body": c.Body, "commit_id": s.head(branch),
			"html_url": fmt.Sprintf("https://github.com/%s/pull/%d#discussion_r%d", s.opt.Repo, number, s.checks.nextID)})
	}
	return id, ids
}

// ClosePull closes pull request number, merged or not.
func (s *Server) ClosePull(number int, merged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls {
		if p["number"] == number {
			p["state"], p["merged"] = "closed", merged
		}
	}
}

// SetPullAuthor makes by the author of pull request number (its "user" and
// "author_association").
func (s *Server) SetPullAuthor(number int, by Reviewer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls {
		if p["number"] == number {
			p["user"], p["author_association"] = map[string]any{"login": by.Login, "type": by.Type}, by.Association
		}
	}
}

// ForkPull makes pull request number come from the fork repo ("owner/name"): its head's
// repository, as GitHub answers head.repo.full_name.
func (s *Server) ForkPull(number int, repo string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls {
		if p["number"] == number {
			head := p["head"].(map[string]any)
			p["head"] = map[string]any{"ref": head["ref"], "repo": map[string]any{"full_name": repo}}
		}
	}
}

func (s *Server) branchOf(number int) string {
	for _, p := range s.pulls {
		if p["number"] == number {
			return p["head"].(map[string]any)["ref"].(string)
		}
	}
	return ""
}

func (s *Server) pull(number int) map[string]any {
	for _, p := range s.pulls {
		if p["number"] == number {
			out := map[string]any{}
			for k, v := range p {
				out[k] = v
			}
			head := p["head"].(map[string]any)
			out["head"] = map[string]any{"ref": head["ref"], "sha": s.head(head["ref"].(string)), "repo": head["repo"]}
			return out
		}
	}
	return nil
}

// serveChecks answers the calls about followed pull requests (held s.mu); it reports whether
// r was one.
func (s *Server) serveChecks(w http.ResponseWriter, r *http.Request, fail func(int, string)) bool {
	if r.Method == http.MethodGet && r.URL.Path == "/user" {
		json.NewEncoder(w).Encode(map[string]any{"login": s.login(), "type": "User"})
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/repos/"+s.opt.Repo+"/")
	if !ok || r.Method != http.MethodGet {
		return false
	}
	parts := strings.Split(rest, "/")
	answer := func(v any) bool {
		s.checks.lookups++
		s.answerConditional(w, r, v)
		return true
	}
	switch {
	case len(parts) == 2 && parts[0] == "pulls":
		n, _ := strconv.Atoi(parts[1])
		if p := s.pull(n); p != nil {
			return answer(p)
		}
	case len(parts) == 3 && parts[0] == "pulls" && (parts[2] == "reviews" || parts[2] == "comments"):
		n, _ := strconv.Atoi(parts[1])
		if s.pull(n) == nil {
			break
		}
		list := s.checks.reviews[n]
		if parts[2] == "comments" {
			list = s.checks.comments[n]
		}
		// Pages as GitHub does: per_page (default 30, at most 100), page from 1, and a Link
		// header naming the next page while there is one.
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if per <= 0 {
			per = 30
		}
		per = min(per, 100)
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		from, to := min((page-1)*per, len(list)), min(page*per, len(list))
		if to < len(list) {
			q := r.URL.Query()
			q.Set("page", strconv.Itoa(page+1))
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?%s>; rel="next"`, r.Host, r.URL.Path, q.Encode()))
		}
		return answer(append([]map[string]any{}, list[from:to]...))
	case len(parts) == 3 && parts[0] == "commits" && parts[2] == "check-runs":
		sha := s.ref(parts[1])
		runs := []map[string]any{}
		// GitHub lists the latest run of each name (filter=latest, the default), newest first.
		seen := map[string]bool{}
		for i := len(s.checks.runs) - 1; i >= 0; i-- {
			if run := s.checks.runs[i]; run["head_sha"] == sha && !seen[run["name"].(string)] {
				seen[run["name"].(string)] = true
				runs = append(runs, run)
			}
		}
		// Pages as GitHub does: per_page (default 30, at most 100), page from 1.
		total := len(runs)
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if per <= 0 {
			per = 30
		}
		per = min(per, 100)
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		from, to := min((page-1)*per, total), min(page*per, total)
		return answer(map[string]any{"total_count": total, "check_runs": runs[from:to]})
	case len(parts) == 3 && parts[0] == "commits" && parts[2] == "status":
		sha := s.ref(parts[1])
		var latest []map[string]any
		seen := map[string]bool{}
		state := "pending"
		for _, st := range s.checks.statuses[sha] {
			if !seen[st["context"].(string)] {
				seen[st["context"].(string)] = true
				latest = append(latest, st)
			}
		}
		if len(latest) > 0 {
			state = "success"
			for _, st := range latest {
				switch st["state"] {
				case "failure", "error":
					state = "failure"
				case "pending":
					if state == "success" {
						state = "pending"
					}
				}
			}
		}
		if latest == nil {
			latest = []map[string]any{}
		}
		return answer(map[string]any{"state": state, "sha": sha, "total_count": len(latest), "statuses": latest})
	case len(parts) == 3 && parts[0] == "check-runs" && parts[2] == "annotations":
		id, _ := strconv.ParseInt(parts[1], 10, 64)
		return answer(append([]map[string]any{}, s.checks.annotations[id]...))
	default:
		return false // the pull requests' list: serve's
	}
	fail(404, "Not Found")
	return true
}

// ref resolves a branch name to its head; a SHA stays itself.
func (s *Server) ref(ref string) string {
	if s.branches[ref] || (s.opt.HasBranch != nil && s.opt.HasBranch(ref)) || s.checks.heads[ref] != "" {
		return s.head(ref)
	}
	return ref
}

func (s *Server) login() string {
	if s.opt.Login != "" {
		return s.opt.Login
	}
	return "logbook-bot"
}

// Delivery is a webhook the fake sent: its id, and the status and body its receiver answered.
type Delivery struct {
	ID     string
	Status int
	Body   string
}

// Send sends a webhook to url as GitHub sends one: a POST of payload as JSON with
// X-GitHub-Event, X-GitHub-Delivery (a new GUID unless id is given), X-GitHub-Hook-ID,
// X-Hub-Signature (HMAC-SHA1) and X-Hub-Signature-256 (HMAC-SHA256, "sha256=" and hex) of the
// body with secret, User-Agent GitHub-Hookshot/…. The repository and sender are added to
// payload when it lacks them.
func (s *Server) Send(tb testing.TB, url, secret, event, id string, payload map[string]any) Delivery {
	tb.Helper()
	if id == "" {
		id = newGUID()
	}
	if _, ok := payload["repository"]; !ok {
		owner, name, _ := strings.Cut(s.opt.Repo, "/")
		payload["repository"] = map[string]any{"full_name": s.opt.Repo, "name": name, "owner": map[string]any{"login": owner}}
	}
	if _, ok := payload["sender"]; !ok {
		payload["sender"] = map[string]any{"login": "octocat", "type": "User"}
	}
	body, err := json.Marshal(payload)
	if err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/f1aa3d2")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-GitHub-Hook-ID", "123456")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	req.Header.Set("X-Hub-Signature", sign1(secret, body))
	req.Header.Set("X-Hub-Signature-256", Sign(secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("send %s webhook: %v", event, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return Delivery{ID: id, Status: resp.StatusCode, Body: string(out)}
}

// Sign is X-Hub-Signature-256's value for body and secret: "sha256=" and the hex HMAC-SHA256.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func sign1(secret string, body []byte) string {
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write(body)
	return "sha1=" + hex.EncodeToString(mac.Sum(nil))
}

func newGUID() string {
	var b [16]byte
	rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// CheckRunEvent is the check_run webhook of check run id, action "completed" (or as given).
func (s *Server) CheckRunEvent(id int64, action string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, run := range s.checks.runs {
		if run["id"] == id {
			cr := map[string]any{}
			for k, v := range run {
				cr[k] = v
			}
			cr["pull_requests"] = s.pullsAt(run["head_sha"].(string))
			cr["check_suite"] = map[string]any{"id": id + 5000, "head_sha": run["head_sha"], "head_branch": s.branchAt(run["head_sha"].(string))}
			return map[string]any{"action": action, "check_run": cr}
		}
	}
	return map[string]any{"action": action, "check_run": map[string]any{"id": id}}
}

// StatusEvent is the status webhook of context's newest status on sha.
func (s *Server) StatusEvent(sha, context string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := map[string]any{"sha": sha, "context": context, "branches": []map[string]any{}}
	for _, st := range s.checks.statuses[sha] {
		if st["context"] == context {
			ev["id"], ev["state"], ev["description"], ev["target_url"] = st["id"], st["state"], st["description"], st["target_url"]
			break
		}
	}
	if b := s.branchAt(sha); b != "" {
		ev["branches"] = []map[string]any{{"name": b, "commit": map[string]any{"sha": sha}}}
	}
	return ev
}

// ReviewEvent is the pull_request_review webhook (action submitted) of review id on pull
// request number.
func (s *Server) ReviewEvent(number int, id int64) map[string]any {
	return s.reviewEvent(number, "submitted", "review", s.checks.reviews, id)
}

// ReviewCommentEvent is the pull_request_review_comment webhook (action created) of comment
// id on pull request number.
func (s *Server) ReviewCommentEvent(number int, id int64) map[string]any {
	return s.reviewEvent(number, "created", "comment", s.checks.comments, id)
}

// reviewEvent is a webhook of pull request number with action whose field key is the item
// with id among the pull request's items in byPull (reviews or review comments), sent by the
// item's author.
func (s *Server) reviewEvent(number int, action, key string, byPull map[int][]map[string]any, id int64) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := map[string]any{"action": action, "pull_request": s.pull(number)}
	for _, item := range byPull[number] {
		if item["id"] == id {
			ev[key] = item
			ev["sender"] = item["user"]
		}
	}
	return ev
}

// PullRequestEvent is the pull_request webhook of pull request number with action (closed,
// synchronize, ...).
func (s *Server) PullRequestEvent(number int, action string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]any{"action": action, "number": number, "pull_request": s.pull(number)}
}

// pullsAt is the check_run payload's pull_requests: the open pull requests whose head is sha.
func (s *Server) pullsAt(sha string) []map[string]any {
	out := []map[string]any{}
	for _, p := range s.pulls {
		ref := p["head"].(map[string]any)["ref"].(string)
		if p["state"] == "open" && s.head(ref) == sha {
			out = append(out, map[string]any{"number": p["number"], "head": map[string]any{"ref": ref, "sha": sha},
				"base": p["base"]})
		}
	}
	return out
}

func (s *Server) branchAt(sha string) string {
	for _, p := range s.pulls {
		if ref := p["head"].(map[string]any)["ref"].(string); s.head(ref) == sha {
			return ref
		}
	}
	return ""
}
