// Package review is the agent's review of a pull request (issue 52), as a turn part: a turn
// that answers "review <pull request url>" (a mention, /logbook review, or a webhook of the
// channel's repository, see Command and Webhook) records what is to be reviewed — the head
// commit, and the changed lines in scope: the whole diff on a first review, only what changed
// since the head reviewed before in the thread after a push — and offers three tools:
// review_diff (the pull request's patches in scope, read from GitHub: the sandbox holds the
// channel's branch, not the pull request's head), review_finding (path, line on the new side,
// severity, reason), each finding an event
// before anything is posted, and submit_review (summary), which posts one GitHub review with
// the findings as inline comments.
//
// Exactly once per head commit, also across a crash, as create_pull_request is: the log is
// asked first (review_posted), then GitHub (a review of logbook's on that commit whose body
// carries the marker "logbook-review head=<sha>"), and only then one is posted, after its
// intent (review_posting) is recorded; a post whose answer was lost is looked for on GitHub
// before anything is said or posted again.
//
// A finding a person dismissed on GitHub is not raised again on that pull request. Dismissed
// means, in what GitHub's REST API shows: the review holding the finding's comment was
// dismissed ("Dismiss review", state DISMISSED), or a collaborator (OWNER, MEMBER or
// COLLABORATOR, not the pull request's author) answered the comment with a reply starting
// with "dismiss" ("dismiss: intended", "dismissed"). A finding is the same one when its
// path and reason are (its fingerprint, carried in the comment).
package review

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// The tools.
const (
	ToolDiff    = "review_diff"
	ToolFinding = "review_finding"
	ToolSubmit  = "submit_review"
)

// Severities a finding may have, gravest first.
var Severities = []string{"critical", "high", "medium", "low", "nit"}

// Forge is what a review needs of GitHub (*forge.GitHub).
type Forge interface {
	PullState(ctx context.Context, repo forge.Repo, number int) (*forge.PullState, error)
	PullFiles(ctx context.Context, repo forge.Repo, number int) ([]forge.PullFile, error)
	Compare(ctx context.Context, repo forge.Repo, base, head string) ([]forge.PullFile, error)
	Reviews(ctx context.Context, repo forge.Repo, number int) ([]forge.Review, error)
	ReviewComments(ctx context.Context, repo forge.Repo, number int) ([]forge.ReviewComment, error)
	CreateReview(ctx context.Context, repo forge.Repo, number int, r forge.NewReview) (*forge.Review, error)
}

// Part offers review_finding and submit_review in the turns of a review.
type Part struct {
	Forge Forge
	// Repo is the channel's repository on GitHub; ok false: it has none there.
	Repo func(ctx context.Context, team, channel string) (repo forge.Repo, ok bool, err error)
	// Login is logbook's account on GitHub (nil, or "": reviews and comments are recognised
	// by their markers alone).
	Login func(ctx context.Context) string
	// Transcript is a session's transcript link for the review's body ("": none).
	Transcript func(id session.ID) string
}

var reviewActor = session.Actor{Kind: session.ActorSystem, ID: "review"}

// askRE is a message asking for a review: "review <url>", after any mentions.
var askRE = regexp.MustCompile(`(?is)^\s*(?:<?@\S+\s+)*review\s+<?(https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pull/([0-9]{1,9}))(?:[/>|#?]\S*)?\s*$`)

// Ask is a request for the review of a pull request, read from a message.
type Ask struct {
	URL    string
	Repo   string // owner/name
	Number int
}

// ParseAsk reads "review <pull request url>" (after any mentions); ok false: text is not one.
func ParseAsk(text string) (Ask, bool) {
	m := askRE.FindStringSubmatch(text)
	if m == nil {
		return Ask{}, false
	}
	n, err := strconv.Atoi(m[4])
	if err != nil || n <= 0 {
		return Ask{}, false
	}
	return Ask{URL: m[1], Repo: m[2] + "/" + m[3], Number: n}, true
}

// Offer records the review a turn's message asks for and offers the tools while the latest
// review of the session is not posted. GitHub that cannot be read is said under the reply.
func (p *Part) Offer(ctx context.Context, s part.Scope) (part.Offer, error) {
	var o part.Offer
	evs := s.Log.Snapshot()
	if msg, ok := askOf(evs, s.Through); ok {
		note, err := p.start(ctx, s, msg)
		if err != nil {
			return o, err
		}
		if note != "" {
			o.Notes = append(o.Notes, note)
			return o, nil
		}
		evs = s.Log.Snapshot()
	}
	req, _, ok := latestRequest(evs)
	if !ok {
		return o, nil
	}
	if _, posted := postedOf(evs, req.Repo, req.Number, req.Head); posted {
		return o, nil
	}
	o.Tools = []brain.Tool{
		brain.NewTool(diffSpec(req), func(ctx context.Context, use brain.ToolUse) brain.Outcome {
			return p.diff(ctx, req, use)
		}),
		brain.NewTool(findingSpec(req), func(ctx context.Context, use brain.ToolUse) brain.Outcome {
			return p.finding(ctx, s, use)
		}),
		brain.NewTool(submitSpec(req), func(ctx context.Context, use brain.ToolUse) brain.Outcome {
			return p.submit(ctx, s, use)
		}),
	}
	return o, nil
}

// askMessage is the user message a turn answers that asks for a review.
type askMessage struct {
	seq int64
	ask Ask
	by  string
}

// askOf is the last user message up to through, when it asks for a review.
func askOf(evs []session.Event, through int64) (askMessage, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		if e.Seq > through || e.Type != session.TypeUserMessage {
			continue
		}
		var m session.UserMessage
		if e.Decode(&m) != nil {
			return askMessage{}, false
		}
		ask, ok := ParseAsk(m.Text)
		by := m.User
		if by == "" {
			by = e.Actor.String()
		}
		return askMessage{seq: e.Seq, ask: ask, by: by}, ok
	}
	return askMessage{}, false
}

// start records the review msg asks for (once per message: its idempotency key), unless the
// pull request is not the channel's repository's, is closed, or its head was reviewed in the
// thread already: then the line to say under the reply.
func (p *Part) start(ctx context.Context, s part.Scope, msg askMessage) (string, error) {
	key := "review_requested/" + strconv.FormatInt(msg.seq, 10)
	for _, e := range s.Log.Snapshot() {
		if e.IdempotencyKey == key {
			return "", nil
		}
	}
	repo, ok, err := p.Repo(ctx, s.Session.Key.Team, s.Session.Key.Channel)
	switch {
	case err != nil:
		s.Logger.Warn().Err(err).Msg("review: the channel's repository cannot be read")
		return "The channel's repository cannot be read right now, so there is no review this time; ask again later.", nil
	case !ok:
		return "This channel has no repository on GitHub (`/logbook repo`), so it reviews no pull request.", nil
	case !strings.EqualFold(repo.String(), msg.ask.Repo):
		return fmt.Sprintf("This channel reviews pull requests of `%s` only; %s#%d is not one.", repo, inert(msg.ask.Repo), msg.ask.Number), nil
	}
	pr, err := p.Forge.PullState(ctx, repo, msg.ask.Number)
	if err != nil {
		s.Logger.Warn().Err(err).Int("number", msg.ask.Number).Msg("review: the pull request cannot be read")
		return fmt.Sprintf("GitHub could not tell me about %s#%d (%s), so there is no review this time.", repo, msg.ask.Number, failure(err)), nil
	}
	if pr.State != "open" {
		return fmt.Sprintf("%s#%d is %s: there is nothing to review.", repo, msg.ask.Number, mrkdwn.EscapeText(clip.Text(pr.State, 40))), nil
	}
	evs := s.Log.Snapshot()
	if posted, ok := postedOf(evs, repo.String(), pr.Number, pr.Head.SHA); ok {
		return fmt.Sprintf("%s#%d at %s was reviewed in this thread already: %s.", repo, pr.Number, short(pr.Head.SHA), mrkdwn.Link(posted.URL, "the review")), nil
	}
	req := session.ReviewRequested{Repo: repo.String(), Number: pr.Number, URL: pr.HTMLURL, Head: pr.Head.SHA, By: msg.by}
	if req.URL == "" {
		req.URL = msg.ask.URL
	}
	var files []forge.PullFile
	if since, ok := lastPostedHead(evs, req.Repo, req.Number); ok && since != req.Head {
		req.Since = since
		files, err = p.Forge.Compare(ctx, repo, since, req.Head)
	} else {
		files, err = p.Forge.PullFiles(ctx, repo, pr.Number)
	}
	if err == nil {
		req.Dismissed, err = p.dismissed(ctx, repo, pr.Number, pr.User.Login)
	}
	if err != nil {
		s.Logger.Warn().Err(err).Int("number", pr.Number).Msg("review: the pull request's changes cannot be read")
		return fmt.Sprintf("GitHub could not give me the changes of %s#%d (%s), so there is no review this time.", repo, pr.Number, failure(err)), nil
	}
	for _, f := range files {
		if lines := Hunks(f.Patch); len(lines) > 0 {
			req.Scope = append(req.Scope, session.ReviewScope{Path: f.Filename, Lines: lines})
		}
	}
	if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeReviewRequested, Actor: reviewActor, IdempotencyKey: key, Payload: req}); err != nil {
		return "", fmt.Errorf("record the review of %s#%d: %w", req.Repo, req.Number, err)
	}
	return "", nil
}

// latestRequest is the session's last review_requested.
func latestRequest(evs []session.Event) (session.ReviewRequested, int64, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != session.TypeReviewRequested {
			continue
		}
		var r session.ReviewRequested
		if evs[i].Decode(&r) == nil {
			return r, evs[i].Seq, true
		}
	}
	return session.ReviewRequested{}, 0, false
}

// postedOf is the review posted in the session of repo's pull request number at head.
func postedOf(evs []session.Event, repo string, number int, head string) (session.ReviewPosted, bool) {
	return session.FirstRecord(evs, session.Range{Types: []session.Type{session.TypeReviewPosted}}, func(p session.ReviewPosted) bool {
		return p.Repo == repo && p.Number == number && p.Head == head
	})
}

// lastPostedHead is the head of the last review of repo's pull request number posted in the
// session.
func lastPostedHead(evs []session.Event, repo string, number int) (string, bool) {
	head := ""
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeReviewPosted}}) {
		var p session.ReviewPosted
		if e.Decode(&p) == nil && p.Repo == repo && p.Number == number {
			head = p.Head
		}
	}
	return head, head != ""
}

// Hunks are the ranges of new-side lines a patch's hunks cover ("@@ -a,b +c,d @@": c to
// c+d-1), in order.
func Hunks(patch string) [][2]int {
	var out [][2]int
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
		start, err := strconv.Atoi(startS)
		if err != nil {
			continue
		}
		count := 1
		if hasCount {
			if count, err = strconv.Atoi(countS); err != nil {
				continue
			}
		}
		if count > 0 {
			out = append(out, [2]int{start, start + count - 1})
		}
	}
	return out
}

// inScope reports whether line of path is among the scope's lines.
func inScope(scope []session.ReviewScope, path string, line int) bool {
	for _, f := range scope {
		if f.Path != path {
			continue
		}
		for _, r := range f.Lines {
			if line >= r[0] && line <= r[1] {
				return true
			}
		}
	}
	return false
}

// Fingerprint names a finding across heads: its path and its reason, spaces and case aside.
func Fingerprint(path, reason string) string {
	norm := strings.Join(strings.Fields(strings.ToLower(reason)), " ")
	sum := sha256.Sum256([]byte(path + "\n" + norm))
	return hex.EncodeToString(sum[:8])
}

// findingMarker is carried by each inline comment, naming its finding's fingerprint.
const findingMarker = "<!-- logbook-finding:"

// fingerprintOf is the fingerprint a comment of ours carries ("": none).
func fingerprintOf(body string) string {
	_, rest, ok := strings.Cut(body, findingMarker)
	if !ok {
		return ""
	}
	fp, _, _ := strings.Cut(rest, " -->")
	return strings.TrimSpace(fp)
}

// mayDismiss reports whether reply c may dismiss a finding: a person (not a bot, not logbook)
// who may push to or administer the repository (author_association OWNER, MEMBER or
// COLLABORATOR), and not the pull request's author, whose change the finding is about.
func mayDismiss(c forge.ReviewComment, login, author string) bool {
	switch {
	case c.User.IsBot() || c.User.Login == "" || (login != "" && strings.EqualFold(c.User.Login, login)):
		return false
	case strings.EqualFold(c.User.Login, author):
		return false
	}
	return slices.Contains([]string{"OWNER", "MEMBER", "COLLABORATOR"}, c.AuthorAssociation)
}

// dismissed are the fingerprints of the findings of ours on the pull request that a person
// dismissed: their review dismissed, or their comment answered with a reply starting with
// "dismiss" by someone who may (mayDismiss; author is the pull request's).
func (p *Part) dismissed(ctx context.Context, repo forge.Repo, number int, author string) ([]string, error) {
	login := p.login(ctx)
	reviews, err := p.Forge.Reviews(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	comments, err := p.Forge.ReviewComments(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	dismissedReview := map[int64]bool{}
	for _, r := range reviews {
		if r.State == "DISMISSED" {
			dismissedReview[r.ID] = true
		}
	}
	ours := map[int64]string{} // comment id -> fingerprint
	for _, c := range comments {
		if fp := fingerprintOf(c.Body); fp != "" && c.InReplyTo == 0 && p.ours(login, c.User) {
			ours[c.ID] = fp
		}
	}
	var out []string
	add := func(fp string) {
		if !slices.Contains(out, fp) {
			out = append(out, fp)
		}
	}
	for _, c := range comments {
		if fp, ok := ours[c.ID]; ok && dismissedReview[c.ReviewID] {
			add(fp)
		}
		if fp, ok := ours[c.InReplyTo]; ok && mayDismiss(c, login, author) &&
			strings.HasPrefix(strings.ToLower(strings.TrimSpace(c.Body)), "dismiss") {
			add(fp)
		}
	}
	return out, nil
}

// findingSpec is review_finding, its description naming what is in scope.
func findingSpec(req session.ReviewRequested) brain.ToolSpec {
	return brain.ToolSpec{
		Name: ToolFinding,
		Description: "Record one finding of your review of " + describe(req) + " Call it once per finding, before submit_review; " +
			"each is recorded, then posted as an inline comment on that line. A finding outside the changed lines in scope, or one a person " +
			"dismissed on this pull request before, is recorded and not posted.",
		Schema: brain.ObjectSchema(map[string]any{
			"path":     brain.Prop("string", "the file's path in the repository"),
			"line":     brain.Prop("integer", "the line in the file's new version (the pull request's head), within the changed lines in scope"),
			"severity": map[string]any{"type": "string", "enum": Severities, "description": "how grave it is"},
			"reason":   brain.Prop("string", "what is wrong and why it was flagged, in one or a few sentences of Markdown"),
		}, "path", "line", "severity", "reason"),
	}
}

// diffSpec is review_diff.
func diffSpec(req session.ReviewRequested) brain.ToolSpec {
	return brain.ToolSpec{
		Name: ToolDiff,
		Description: "Show the changes under review of " + describe(req) + " Returns GitHub's unified diff of each changed file in scope " +
			"(only what changed since the last review, on a re-review); give a path to see one file when the whole is cut.",
		Schema: brain.ObjectSchema(map[string]any{
			"path": brain.Prop("string", "one file's path (optional; default every file in scope)"),
		}),
	}
}

// maxDiff bounds review_diff's answer (a tool result the model reads, recorded in the log).
const maxDiff = 60_000

// diff answers review_diff: the patches of the review's files in scope, read from GitHub
// again at the review's head (and since the head reviewed before, on a re-review), so the
// model reviews what the pull request changes, not the channel's checkout.
func (p *Part) diff(ctx context.Context, req session.ReviewRequested, use brain.ToolUse) brain.Outcome {
	var in struct {
		Path string `json:"path"`
	}
	if len(use.Input) > 0 {
		if err := use.Decode(&in); err != nil {
			return brain.Failure("%s", err)
		}
	}
	repo, err := forge.ParseRepo(req.Repo)
	if err != nil {
		return brain.Failure("the review's repository %s cannot be read: %v", req.Repo, err)
	}
	var files []forge.PullFile
	if req.Since != "" {
		files, err = p.Forge.Compare(ctx, repo, req.Since, req.Head)
	} else {
		files, err = p.Forge.PullFiles(ctx, repo, req.Number)
	}
	if err != nil {
		return brain.Failure("GitHub could not give the changes (%s); try again", failure(err))
	}
	inScope := map[string]bool{}
	for _, f := range req.Scope {
		inScope[f.Path] = true
	}
	var sb strings.Builder
	shown := 0
	for _, f := range files {
		if in.Path != "" && f.Filename != in.Path {
			continue
		}
		shown++
		fmt.Fprintf(&sb, "--- %s (%s)", f.Filename, f.Status)
		if !inScope[f.Filename] {
			sb.WriteString(" — no changed lines in scope")
		}
		sb.WriteString("\n")
		if f.Patch == "" {
			sb.WriteString("(no patch from GitHub: a binary file, or too large; read it in the workspace)\n")
			continue
		}
		sb.WriteString(f.Patch)
		sb.WriteString("\n")
	}
	if shown == 0 {
		if in.Path != "" {
			return brain.Failure("%s is not among the files this review covers", in.Path)
		}
		return brain.Outcome{Content: "The pull request changes no file in this review's scope."}
	}
	out := sb.String()
	if len(out) > maxDiff {
		out = clip.Text(out, maxDiff) + "\n[cut at " + strconv.Itoa(maxDiff) + " bytes: call review_diff with a path to see one file whole]"
	}
	return brain.Outcome{Content: out}
}

// submitSpec is submit_review.
func submitSpec(req session.ReviewRequested) brain.ToolSpec {
	return brain.ToolSpec{
		Name: ToolSubmit,
		Description: "Finish your review of " + describe(req) + " Posts one review on GitHub with your recorded findings as inline comments " +
			"and the summary as its body (once per head commit: calling it again returns the review posted). Then reply in the thread with the summary.",
		Schema: brain.ObjectSchema(map[string]any{
			"summary": brain.Prop("string", "the review's overall assessment, in Markdown"),
			"approve": brain.Prop("boolean", "approve the pull request (only where the channel allows reviews to approve; otherwise it is a comment)"),
		}, "summary"),
	}
}

// maxScopeText bounds the scope's lines in a tool's description.
const maxScopeText = 4000

// describe is the review's pull request, head and scope, for the model.
func describe(req session.ReviewRequested) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s#%d at commit %s", req.Repo, req.Number, short(req.Head))
	if req.Since != "" {
		fmt.Fprintf(&sb, " (a re-review: only what changed since %s is in scope)", short(req.Since))
	}
	sb.WriteString(". The changes are what review_diff shows; the workspace is the channel's checkout of its branch, not the pull request's head, so read the repository's instruction files (AGENTS.md, CLAUDE.md) and the code around the changes there. Changed lines in scope:")
	if len(req.Scope) == 0 {
		sb.WriteString(" none.")
	}
	for _, f := range req.Scope {
		var rs []string
		for _, r := range f.Lines {
			rs = append(rs, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
		sb.WriteString(" " + f.Path + ": " + strings.Join(rs, ", ") + ";")
	}
	return clip.Text(sb.String(), maxScopeText)
}

func short(sha string) string {
	if strings.ContainsFunc(sha, func(r rune) bool { return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') }) {
		return "(not a commit id)" // a forge's answer is not trusted to be one
	}
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// finding records one finding.
func (p *Part) finding(ctx context.Context, s part.Scope, use brain.ToolUse) brain.Outcome {
	var in struct {
		Path     string `json:"path"`
		Line     int    `json:"line"`
		Severity string `json:"severity"`
		Reason   string `json:"reason"`
	}
	if err := use.Decode(&in); err != nil {
		return brain.Failure("%v", err)
	}
	in.Path, in.Reason, in.Severity = strings.TrimPrefix(strings.TrimSpace(in.Path), "/"), strings.TrimSpace(in.Reason), strings.ToLower(strings.TrimSpace(in.Severity))
	switch {
	case in.Path == "" || in.Reason == "" || in.Line <= 0:
		return brain.Failure("path, a line above 0 and reason are required")
	case !slices.Contains(Severities, in.Severity):
		return brain.Failure("severity must be one of %s", strings.Join(Severities, ", "))
	case len(in.Reason) > 4000:
		return brain.Failure("the reason has %d bytes; at most 4000", len(in.Reason))
	}
	evs := s.Log.Snapshot()
	req, _, ok := latestRequest(evs)
	if !ok {
		return brain.Failure("there is no review in this thread")
	}
	if posted, ok := postedOf(evs, req.Repo, req.Number, req.Head); ok {
		return brain.Failure("the review of this commit was posted already: %s", posted.URL)
	}
	f := session.ReviewFinding{CallID: use.ID, Repo: req.Repo, Number: req.Number, Head: req.Head, Path: in.Path, Line: in.Line,
		Severity: in.Severity, Reason: in.Reason, Fingerprint: Fingerprint(in.Path, in.Reason)}
	switch {
	case !inScope(req.Scope, in.Path, in.Line):
		f.Dropped = "outside the changed lines in scope"
	case slices.Contains(req.Dismissed, f.Fingerprint):
		f.Dropped = "dismissed on GitHub before"
	default:
		for _, prev := range findings(evs, req) {
			if prev.Fingerprint == f.Fingerprint {
				return brain.Outcome{Content: "that finding is recorded already"}
			}
		}
	}
	if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeReviewFinding, Actor: reviewActor,
		IdempotencyKey: "review_finding/" + use.ID, Payload: f}); err != nil {
		s.Logger.Error().Err(err).Msg("review_finding: could not record the finding")
		return brain.Failure("the finding could not be recorded; try again")
	}
	if f.Dropped != "" {
		return brain.Outcome{Content: fmt.Sprintf("recorded, not to be posted: %s:%d is %s", f.Path, f.Line, f.Dropped)}
	}
	return brain.Outcome{Content: fmt.Sprintf("recorded: %s:%d (%s)", f.Path, f.Line, f.Severity)}
}

// findings are the findings of req to post, in the order recorded.
func findings(evs []session.Event, req session.ReviewRequested) []session.ReviewFinding {
	var out []session.ReviewFinding
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeReviewFinding}}) {
		var f session.ReviewFinding
		if e.Decode(&f) == nil && f.Repo == req.Repo && f.Number == req.Number && f.Head == req.Head && f.Dropped == "" {
			out = append(out, f)
		}
	}
	return out
}

// reviewMarker is what a review's body carries: the head it reviews, the session.
func reviewMarker(head string, id session.ID) string {
	return "<!-- logbook-review head=" + head + " session=" + id.String() + " -->"
}

// submit posts the review, exactly once per pull request and head (see the package's comment).
func (p *Part) submit(ctx context.Context, s part.Scope, use brain.ToolUse) brain.Outcome {
	var in struct {
		Summary string `json:"summary"`
		Approve bool   `json:"approve"`
	}
	if err := use.Decode(&in); err != nil {
		return brain.Failure("%v", err)
	}
	if in.Summary = strings.TrimSpace(in.Summary); in.Summary == "" {
		return brain.Failure("summary is required")
	}
	evs := s.Log.Snapshot()
	req, _, ok := latestRequest(evs)
	if !ok {
		return brain.Failure("there is no review in this thread")
	}
	if posted, ok := postedOf(evs, req.Repo, req.Number, req.Head); ok {
		return brain.Outcome{Content: "the review of this commit was posted already: " + posted.URL}
	}
	repo, err := forge.ParseRepo(req.Repo)
	if err != nil {
		return brain.Failure("%v", err)
	}
	event := forge.EventComment
	note := ""
	if in.Approve {
		if s.Channel != nil && s.Channel.Value(settings.ReviewApprove) == settings.ReviewApproveAllow {
			event = forge.EventApprove
		} else {
			note = " It is a comment, not an approval: this channel's reviews do not approve (review_approve)."
		}
	}
	record := func(r *forge.Review, found bool, comments int) brain.Outcome {
		posted := session.ReviewPosted{CallID: use.ID, Repo: req.Repo, Number: req.Number, Head: req.Head, Event: event,
			ReviewID: r.ID, URL: r.HTMLURL, Comments: comments, Summary: clip.Text(in.Summary, 4000), Found: found}
		if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeReviewPosted, Actor: reviewActor, IdempotencyKey: posted.Key(), Payload: posted}); err != nil {
			s.Logger.Error().Err(err).Str("url", r.HTMLURL).Msg("submit_review: could not record the review")
			return brain.Failure("the review could not be recorded; it is %s", r.HTMLURL)
		}
		verb := "posted"
		if found {
			verb = "found, posted already:"
		}
		return brain.Outcome{Content: fmt.Sprintf("review %s %s with %d inline comments.%s Now reply in the thread with the summary.", verb, r.HTMLURL, comments, note)}
	}
	// GitHub first: a review of ours on this head, an earlier attempt's of this session.
	if r, err := p.findPosted(ctx, repo, req, evs); err != nil {
		return brain.Failure("%s", failure(err))
	} else if r != nil {
		return record(r, true, 0)
	}
	// Findings a person dismissed since the review started are not raised again either.
	pr, err := p.Forge.PullState(ctx, repo, req.Number)
	if err != nil {
		return brain.Failure("%s", failure(err))
	}
	dismissed, err := p.dismissed(ctx, repo, req.Number, pr.User.Login)
	if err != nil {
		return brain.Failure("%s", failure(err))
	}
	why := ""
	if event == forge.EventApprove && pr.Head.SHA != req.Head {
		// The author pushed since the review read the diff: an approval would be of a commit
		// nobody reviewed, and the checks below would read the new one's files.
		why = "the pull request's head moved to " + short(pr.Head.SHA) + " after the review read " + short(req.Head)
		event = forge.EventComment
		note = " It is a comment, not an approval: " + why + "."
	}
	if event == forge.EventApprove {
		if why, err = p.noApproval(ctx, repo, pr); err != nil {
			return brain.Failure("%s", failure(err))
		}
		if why != "" {
			event = forge.EventComment
			note = " It is a comment, not an approval: " + why + "."
		}
	}
	var comments []forge.ReviewLineNew
	for _, f := range findings(evs, req) {
		if slices.Contains(dismissed, f.Fingerprint) {
			continue
		}
		comments = append(comments, forge.ReviewLineNew{Path: f.Path, Line: f.Line, Side: "RIGHT", Body: commentBody(f)})
	}
	body := forge.Outbound(clip.Text(in.Summary, 20000))
	if why != "" {
		body += "\n\n_logbook does not approve this pull request: " + why + "._"
	}
	if p.Transcript != nil {
		if link := p.Transcript(s.Session.ID); link != "" {
			body += "\n\n---\nReviewed by logbook from a Slack thread: [transcript](" + link + ")"
		}
	}
	marker := reviewMarker(req.Head, s.Session.ID)
	if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeReviewPosting, Actor: reviewActor, IdempotencyKey: "review_posting/" + use.ID,
		Payload: session.ReviewPosting{CallID: use.ID, Repo: req.Repo, Number: req.Number, Head: req.Head, Event: event, Marker: marker}}); err != nil {
		s.Logger.Error().Err(err).Msg("submit_review: could not record the intent")
		return brain.Failure("the review could not be recorded before posting; try again")
	}
	nr := forge.NewReview{CommitID: req.Head, Body: body + "\n\n" + marker, Event: event, Comments: comments}
	r, err := p.Forge.CreateReview(ctx, repo, req.Number, nr)
	var fe *forge.Error
	if err != nil && errors.As(err, &fe) && fe.Status == 422 && len(comments) > 0 && strings.Contains(fe.Message, "could not be resolved") {
		// A line GitHub cannot place: the comments go into the body instead, still one review.
		nr.Comments = nil
		nr.Body = body + "\n\n" + inlineAsList(comments) + "\n\n" + marker
		r, err = p.Forge.CreateReview(ctx, repo, req.Number, nr)
		comments = nil
	}
	if err != nil {
		if !errors.As(err, &fe) {
			// No answer: it may have been posted. GitHub says.
			if again, ferr := p.findPosted(ctx, repo, req, s.Log.Snapshot()); ferr == nil && again != nil {
				return record(again, true, len(comments))
			}
		}
		return brain.Failure("%s", failure(err))
	}
	return record(r, false, len(comments))
}

// instructionFiles are the files that instruct an agent reading the repository: a pull request
// changing one (anywhere in the tree) may have told the reviewer what to conclude.
var instructionFiles = []string{"agents.md", "claude.md"}

// noApproval is why pull request pr must not be approved, even where the channel allows it
// ("": it may be): its head is in a fork (its author controls what the review read), or it
// changes an instruction file the agent reads. A list of files GitHub may have cut (300)
// cannot show there is none.
func (p *Part) noApproval(ctx context.Context, repo forge.Repo, pr *forge.PullState) (string, error) {
	if pr.FromFork() {
		return "it comes from a fork", nil
	}
	files, err := p.Forge.PullFiles(ctx, repo, pr.Number)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		name := strings.ToLower(f.Filename[strings.LastIndex(f.Filename, "/")+1:])
		if slices.Contains(instructionFiles, name) {
			return "it changes the instruction file " + strings.ReplaceAll(f.Filename, "`", "'"), nil
		}
	}
	if len(files) >= 300 {
		return "it changes too many files to tell whether it changes an instruction file", nil
	}
	return "", nil
}

// login is logbook's account on GitHub ("": unknown).
func (p *Part) login(ctx context.Context) string {
	if p.Login == nil {
		return ""
	}
	return p.Login(ctx)
}

// findPosted is a review of logbook's on req's head, found on GitHub by its marker (nil:
// none): written by logbook's account (see ours), its marker one this session recorded in a
// review_posting among evs. No intent recorded: nothing of this session's can be there.
func (p *Part) findPosted(ctx context.Context, repo forge.Repo, req session.ReviewRequested, evs []session.Event) (*forge.Review, error) {
	markers := intents(evs, req)
	login := p.login(ctx)
	if len(markers) == 0 && login == "" {
		return nil, nil
	}
	reviews, err := p.Forge.Reviews(ctx, repo, req.Number)
	if err != nil {
		return nil, err
	}
	// With logbook's login known, a review of this head by that account from any thread (two
	// channels on one repository, a second mention) is the one review of the head: only that
	// account can have written it, so no person can forge it.
	head := "<!-- logbook-review head=" + req.Head + " "
	for i := range reviews {
		r := &reviews[i]
		if !p.ours(login, r.User) {
			continue
		}
		if login != "" && strings.Contains(r.Body, head) {
			return r, nil
		}
		for _, m := range markers {
			if strings.Contains(r.Body, m) {
				return r, nil
			}
		}
	}
	return nil, nil
}

// intents are the markers of the reviews of req's head this session recorded it was posting
// (review_posting): the only markers a review found on GitHub may carry to count as its own.
func intents(evs []session.Event, req session.ReviewRequested) []string {
	var out []string
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeReviewPosting}}) {
		var p session.ReviewPosting
		if e.Decode(&p) == nil && p.Repo == req.Repo && p.Number == req.Number && p.Head == req.Head && p.Marker != "" && !slices.Contains(out, p.Marker) {
			out = append(out, p.Marker)
		}
	}
	return out
}

// ours reports whether u is logbook's account: its login, when known; when it is not (an
// installation token cannot ask GitHub), an account GitHub marks as a bot — never a person,
// who could otherwise write logbook's markers into a review or comment of their own.
func (p *Part) ours(login string, u forge.User) bool {
	if login != "" {
		return strings.EqualFold(u.Login, login)
	}
	return u.IsBot()
}

// commentBody is a finding as its inline comment says it: the severity, why it was flagged,
// and its fingerprint's marker.
func commentBody(f session.ReviewFinding) string {
	return "**" + strings.ToUpper(f.Severity[:1]) + f.Severity[1:] + "** — why flagged: " + forge.Outbound(f.Reason) +
		"\n\n" + findingMarker + f.Fingerprint + " -->"
}

// inlineAsList is the comments GitHub could not place, as the review body's list.
func inlineAsList(comments []forge.ReviewLineNew) string {
	var sb strings.Builder
	sb.WriteString("Findings (GitHub could not place them on their lines):\n")
	for _, c := range comments {
		body, _, _ := strings.Cut(c.Body, "\n\n"+findingMarker)
		fmt.Fprintf(&sb, "- `%s:%d` %s\n", strings.ReplaceAll(c.Path, "`", "'"), c.Line, body)
	}
	return strings.TrimRight(sb.String(), "\n")
}

// inert is text from a message, safe in a Slack line.
func inert(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "'").Replace(s)
}

// failure is what the model or the thread is told of a failed call to GitHub: GitHub's own
// words, never the token.
func failure(err error) string {
	var fe *forge.Error
	if errors.As(err, &fe) {
		return fmt.Sprintf("GitHub refused: %s (HTTP %d)", fe.Message, fe.Status)
	}
	var rl *forge.RateLimitError
	if errors.As(err, &rl) {
		return "GitHub's rate limit is spent; try again later"
	}
	return "GitHub did not answer; try again later"
}

// Footer links the reviews the turn posted (part.Footer).
func (p *Part) Footer(s part.Scope) []string {
	var notes []string
	for _, e := range session.Select(s.Log.Snapshot(), session.Range{From: s.Turn + 1, Types: []session.Type{session.TypeReviewPosted}}) {
		var r session.ReviewPosted
		if e.Decode(&r) == nil && strings.HasPrefix(r.URL, "https://") {
			notes = append(notes, fmt.Sprintf(":mag: %s at `%s`, %d inline comments",
				mrkdwn.Link(r.URL, fmt.Sprintf("review of %s#%d", r.Repo, r.Number)), mrkdwn.EscapeText(short(r.Head)), r.Comments))
		}
	}
	return notes
}
