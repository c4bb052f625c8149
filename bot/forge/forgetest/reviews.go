package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// File is one file a commit changes: its path and the unified diff's hunks, as GitHub's
// "patch" field holds them ("@@ -1,2 +1,3 @@" and the lines).
type File struct {
	Path  string
	Patch string
}

// commit is a commit pushed to a pull request's branch (Push).
type commit struct {
	sha   string
	files []File
}

// reviewState is what the fake knows of pull requests' commits and the reviews it was sent.
type reviewState struct {
	base       map[int]string   // pull number -> its head before the first Push
	commits    map[int][]commit // pull number -> commits pushed, oldest first
	creates    int              // reviews created through the API
	dropReview bool
}

// Push pushes a commit sha on pull request number's branch, changing files: the branch's head
// moves to sha. The pull request's files are its commits' files, hunks of one path joined
// (the fake does not move a later commit's hunks by an earlier one's: tests keep them apart).
func (s *Server) Push(number int, sha string, files ...File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	branch := s.branchOf(number)
	if s.reviews.base == nil {
		s.reviews.base, s.reviews.commits = map[int]string{}, map[int][]commit{}
	}
	if _, ok := s.reviews.base[number]; !ok {
		s.reviews.base[number] = s.head(branch)
	}
	s.reviews.commits[number] = append(s.reviews.commits[number], commit{sha: sha, files: files})
	s.checks.heads[branch] = sha
}

// DropNextReview makes the next review created succeed and its connection drop without an
// answer.
func (s *Server) DropNextReview() {
	s.mu.Lock()
	s.reviews.dropReview = true
	s.mu.Unlock()
}

// Reviews is how many reviews were created through the API, and pull request number's reviews
// and review comments as GitHub lists them.
func (s *Server) Reviews(number int) (creates int, reviews, comments []map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reviews.creates, append([]map[string]any(nil), s.checks.reviews[number]...), append([]map[string]any(nil), s.checks.comments[number]...)
}

// DismissReview dismisses review id of pull request number, as a person with write access does
// ("Dismiss review"): its state becomes DISMISSED.
func (s *Server) DismissReview(number int, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.checks.reviews[number] {
		if r["id"] == id {
			r["state"] = "DISMISSED"
		}
	}
}

// Reply answers review comment to of pull request number with body, by by: a comment with
// in_reply_to_id, on the same path and line. It returns the reply's id.
func (s *Server) Reply(number int, to int64, by Reviewer, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var orig map[string]any
	for _, c := range s.checks.comments[number] {
		if c["id"] == to {
			orig = c
		}
	}
	if orig == nil {
		return 0
	}
	s.checks.nextID++
	id := s.checks.nextID
	assoc := by.Association
	if assoc == "" {
		assoc = "COLLABORATOR"
	}
	s.checks.comments[number] = append(s.checks.comments[number], map[string]any{"id": id, "pull_request_review_id": id,
		"in_reply_to_id": to, "user": map[string]any{"login": by.Login, "type": by.Type}, "author_association": assoc,
		"path": orig["path"], "line": orig["line"], "original_line": orig["line"], "body": body, "commit_id": orig["commit_id"]})
	return id
}

// filesUpTo are pull request number's files from its base to commit sha, hunks of a path
// joined; ok false when sha is not one of its commits.
func (s *Server) filesBetween(number int, from, to string) ([]map[string]any, bool) {
	commits := s.reviews.commits[number]
	start := 0
	if from != s.reviews.base[number] {
		start = -1
		for i, c := range commits {
			if c.sha == from {
				start = i + 1
			}
		}
		if start < 0 {
			return nil, false
		}
	}
	end := -1
	for i, c := range commits {
		if c.sha == to {
			end = i + 1
		}
	}
	if end < start {
		return nil, false
	}
	var order []string
	patches := map[string][]string{}
	for _, c := range commits[start:end] {
		for _, f := range c.files {
			if _, ok := patches[f.Path]; !ok {
				order = append(order, f.Path)
			}
			patches[f.Path] = append(patches[f.Path], strings.TrimRight(f.Patch, "\n"))
		}
	}
	out := []map[string]any{}
	for _, p := range order {
		out = append(out, map[string]any{"filename": p, "status": "modified", "patch": strings.Join(patches[p], "\n")})
	}
	return out, true
}

// newLines are the new side's lines a patch's hunks cover.
func newLines(patch string) map[int]bool {
	lines := map[int]bool{}
	for _, l := range strings.Split(patch, "\n") {
		rest, ok := strings.CutPrefix(l, "@@ -")
		if !ok {
			continue
		}
		_, plus, ok := strings.Cut(rest, " +")
		if !ok {
			continue
		}
		plus, _, _ = strings.Cut(plus, " ")
		startS, countS, hasCount := strings.Cut(plus, ",")
		start, _ := strconv.Atoi(startS)
		count := 1
		if hasCount {
			count, _ = strconv.Atoi(countS)
		}
		for i := start; i < start+count; i++ {
			lines[i] = true
		}
	}
	return lines
}

// serveReviews answers a pull request's files, a comparison of two commits and a review's
// creation (held s.mu); it reports whether r was one of them.
func (s *Server) serveReviews(w http.ResponseWriter, r *http.Request, fail func(int, string)) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/repos/"+s.opt.Repo+"/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	switch {
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "pulls" && parts[2] == "files":
		n, _ := strconv.Atoi(parts[1])
		p := s.pull(n)
		if p == nil {
			fail(404, "Not Found")
			return true
		}
		files, _ := s.filesBetween(n, s.reviews.base[n], p["head"].(map[string]any)["sha"].(string))
		if page, _ := strconv.Atoi(r.URL.Query().Get("page")); page > 1 {
			files = []map[string]any{}
		}
		json.NewEncoder(w).Encode(files)
		return true
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "compare":
		base, head, ok := strings.Cut(parts[1], "...")
		if !ok {
			fail(404, "Not Found")
			return true
		}
		for n := range s.reviews.commits {
			if files, ok := s.filesBetween(n, base, head); ok {
				json.NewEncoder(w).Encode(map[string]any{"status": "ahead", "base_commit": map[string]any{"sha": base}, "files": files})
				return true
			}
		}
		fail(404, "Not Found")
		return true
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "pulls" && parts[2] == "reviews":
		n, _ := strconv.Atoi(parts[1])
		p := s.pull(n)
		if p == nil {
			fail(404, "Not Found")
			return true
		}
		s.createReview(w, r, n, p["head"].(map[string]any)["sha"].(string), fail)
		return true
	}
	return false
}

// createReview creates a review of pull request n as GitHub does: its event one of COMMENT,
// APPROVE, REQUEST_CHANGES; its commit one of the pull request's (default the head); each
// comment on a line of a hunk of the diff's new side, or the whole review is refused with
// 422 "Line could not be resolved".
func (s *Server) createReview(w http.ResponseWriter, r *http.Request, n int, head string, fail func(int, string)) {
	var in struct {
		CommitID string `json:"commit_id"`
		Body     string `json:"body"`
		Event    string `json:"event"`
		Comments []struct {
			Path string `json:"path"`
			Line int    `json:"line"`
			Side string `json:"side"`
			Body string `json:"body"`
		} `json:"comments"`
	}
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil {
		fail(422, "Validation Failed")
		return
	}
	state := map[string]string{"COMMENT": "COMMENTED", "APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED"}[in.Event]
	if state == "" {
		fail(422, "Unprocessable Entity")
		return
	}
	if in.CommitID == "" {
		in.CommitID = head
	}
	files, ok := s.filesBetween(n, s.reviews.base[n], in.CommitID)
	if !ok {
		w.WriteHeader(422)
		json.NewEncoder(w).Encode(map[string]any{"message": "Unprocessable Entity", "errors": []string{"commit_id is not part of the pull request"}})
		return
	}
	for _, c := range in.Comments {
		resolved := false
		for _, f := range files {
			if f["filename"] == c.Path && (c.Side == "" || c.Side == "RIGHT") && newLines(f["patch"].(string))[c.Line] {
				resolved = true
			}
		}
		if !resolved {
			w.WriteHeader(422)
			json.NewEncoder(w).Encode(map[string]any{"message": "Unprocessable Entity", "errors": []string{"Line could not be resolved"},
				"documentation_url": "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request", "status": "422"})
			return
		}
	}
	s.reviews.creates++
	s.checks.nextID++
	id := s.checks.nextID
	user := map[string]any{"login": s.login(), "type": "User"}
	review := map[string]any{"id": id, "user": user, "state": state, "body": in.Body, "author_association": "MEMBER",
		"commit_id": in.CommitID, "html_url": fmt.Sprintf("https://github.com/%s/pull/%d#pullrequestreview-%d", s.opt.Repo, n, id),
		"submitted_at": time.Now().UTC().Format(time.RFC3339)}
	s.checks.reviews[n] = append(s.checks.reviews[n], review)
	for _, c := range in.Comments {
		s.checks.nextID++
		s.checks.comments[n] = append(s.checks.comments[n], map[string]any{"id": s.checks.nextID, "pull_request_review_id": id,
			"user": user, "author_association": "MEMBER", "path": c.Path, "line": c.Line, "original_line": c.Line, "side": "RIGHT",
			"body": c.Body, "commit_id": in.CommitID,
			"html_url": fmt.Sprintf("https://github.com/%s/pull/%d#discussion_r%d", s.opt.Repo, n, s.checks.nextID)})
	}
	if s.reviews.dropReview {
		s.reviews.dropReview = false
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
		return
	}
	w.WriteHeader(200)
	json.NewEncoder(w).Encode(review)
}
