// Package canvas writes a reply too long for a thread as a Slack canvas and links it from the
// thread (issue 54). It is a turn part (a part.Presenter): when the model's reply passes the
// channel's canvas_over characters (bot/settings; 0 never), the reply is written as a
// standalone canvas (canvases.create), the thread's channel is given read access to it
// (canvases.access.set), and the thread's message carries a link to the canvas (its
// permalink, from files.info) and the answer's beginning instead of the whole answer.
//
// Exactly once, through a crash: the intent (canvas_started: the reply, the title with its
// stable key, the content's hash) is appended before Slack is asked to create the canvas, and
// canvas_written (the canvas's id, its channel, title, hash, characters, permalink) after it
// exists and before the reply that links it is posted. A cell that finds canvas_started
// without canvas_written does not know whether the dead cell's canvases.create happened: it
// looks the canvas up among the bot's own files since the intent (files.list), by the title's
// key, and creates one only when there is none. A canvas created twice would need the lookup
// to miss a canvas Slack created; nothing is posted in the thread before canvas_written.
package canvas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/part"
	"github.com/logbook/logbook/bot/settings"
	"github.com/logbook/logbook/bot/wait"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/clip"
)

// Slack is the part of slack-go's Web API client canvases use (*slack.Client).
type Slack interface {
	CreateCanvasContext(ctx context.Context, title string, doc slack.DocumentContent, opts ...slack.CreateCanvasOption) (string, error)
	SetCanvasAccessContext(ctx context.Context, params slack.SetCanvasAccessParams) error
	GetFilesContext(ctx context.Context, params slack.GetFilesParameters) ([]slack.File, *slack.Paging, error)
	GetFileInfoContext(ctx context.Context, fileID string, count, page int) (*slack.File, []slack.Comment, *slack.Paging, error)
}

// Part writes long replies as canvases (part.Presenter). Sleep waits out a rate limit
// (default: a timer); tests pass their clock's.
type Part struct {
	Slack Slack
	Sleep func(ctx context.Context, d time.Duration) error
}

var canvasActor = session.Actor{Kind: session.ActorSystem, ID: "canvas"}

// ExcerptChars is about how much of the answer the thread's message shows under the link.
const ExcerptChars = 1500

// rateLimitWaits is how many rate limits in a row one call waits out before it gives the turn
// back (it stays open, and is resumed).
const rateLimitWaits = 3

// Offer gives the agent no tool (a canvas is how its reply is shown); the turn's
// turn_settings records the channel's own canvas_over, when it set one.
func (p *Part) Offer(_ context.Context, s part.Scope) (part.Offer, error) {
	if s.Channel == nil {
		return part.Offer{}, nil
	}
	r, ok := s.Channel.Record(settings.CanvasOver)
	if !ok {
		return part.Offer{}, nil
	}
	return part.Offer{Settings: func(rec *session.TurnSettings) { rec.CanvasOver = r.New }}, nil
}

// Over is the channel's canvas_over in characters (0: never): its setting, else the default.
func Over(s part.Scope) int {
	if s.Channel == nil {
		return settings.DefaultCanvasOver
	}
	n, err := settings.ParseCanvasOver(s.Channel.Value(settings.CanvasOver))
	if err != nil {
		return settings.DefaultCanvasOver
	}
	return n
}

// Present shows a reply over the channel's canvas_over as a link to a canvas holding it, and
// its beginning (part.Presenter). It records canvas_started before creating the canvas and
// canvas_written before it returns; a reply recorded before (a resumed turn) is linked again
// without a call to Slack. A refusal Slack means for good (canvases off in the workspace, a
// scope missing) is logged and the reply is shown as it is; one that may pass (a rate limit
// that lasts, Slack down, an answer lost) is an error: the turn stays open and is resumed.
func (p *Part) Present(ctx context.Context, s part.Scope, reply session.Event) (string, bool, error) {
	var msg session.AssistantMessage
	if err := reply.Decode(&msg); err != nil || msg.Own {
		return "", false, nil
	}
	over, chars := Over(s), utf8.RuneCountInString(msg.Text)
	if over == 0 || chars <= over {
		return "", false, nil
	}
	id := reply.ID.String()
	written, started, startedAt := records(s.Log.Snapshot(), id)
	if written != nil {
		return linkText(*written, msg.Text), true, nil
	}
	log := s.Logger.With().Str("part", "canvas").Str("reply", id).Logger()
	content := inert(msg.Text)
	again := started != nil // the intent was recorded before: a dead cell may have created the canvas
	if !again {
		st := session.CanvasStarted{Reply: id, Channel: s.Session.Key.Channel, Key: Key(id), SHA256: session.FileHash([]byte(content)),
			Chars: utf8.RuneCountInString(content)}
		st.Title = Title(msg.Text, st.Key)
		stored, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeCanvasStarted, Actor: canvasActor, IdempotencyKey: st.IdempotencyKey(), Payload: st})
		if err != nil {
			return "", false, err
		}
		started, startedAt = &st, stored[0].CreatedAt
	}
	w := session.CanvasWritten{Reply: id, Channel: started.Channel, Title: started.Title, SHA256: started.SHA256, Chars: started.Chars}
	if again {
		found, err := p.lookup(ctx, s.BotUser, *started, startedAt)
		if err != nil {
			return p.failed(log, "look for the canvas a dead cell may have created", err)
		}
		w.CanvasID, w.Found = found, found != ""
	}
	if w.CanvasID == "" {
		err := p.call(ctx, func() (err error) {
			w.CanvasID, err = p.Slack.CreateCanvasContext(ctx, started.Title, slack.DocumentContent{Type: "markdown", Markdown: content})
			return err
		})
		if err != nil {
			return p.failed(log, "create the canvas", err)
		}
	}
	// Standalone and the bot's own: the thread's channel may read it (not edit it).
	if err := p.call(ctx, func() error {
		return p.Slack.SetCanvasAccessContext(ctx, slack.SetCanvasAccessParams{CanvasID: w.CanvasID, AccessLevel: "read", ChannelIDs: []string{started.Channel}})
	}); err != nil {
		return p.failed(log, "give the channel read access to the canvas", err)
	}
	if err := p.call(ctx, func() error {
		f, _, _, err := p.Slack.GetFileInfoContext(ctx, w.CanvasID, 0, 0)
		if err == nil && f != nil {
			w.Permalink = f.Permalink
		}
		return err
	}); err != nil {
		return p.failed(log, "read the canvas's permalink", err)
	}
	if _, err := s.Log.Append(ctx, session.NewEvent{Type: session.TypeCanvasWritten, Actor: canvasActor, IdempotencyKey: w.IdempotencyKey(), Payload: w}); err != nil {
		return "", false, err
	}
	log.Info().Str("canvas", w.CanvasID).Int("chars", w.Chars).Bool("found", w.Found).Msg("reply written as a canvas")
	return linkText(w, msg.Text), true, nil
}

// failed is Present's answer to a Slack failure: one that may pass is the turn's error; one
// that will not is logged, and the reply is shown as it is.
func (p *Part) failed(log zerolog.Logger, what string, err error) (string, bool, error) {
	if transient(err) {
		return "", false, fmt.Errorf("%s: %w", what, err)
	}
	log.Warn().Err(err).Msg("cannot " + what + ": the reply goes to the thread whole")
	return "", false, nil
}

// records finds the canvas_written and canvas_started of reply in evs (nil: none), and when
// the latter was appended.
func records(evs []session.Event, reply string) (*session.CanvasWritten, *session.CanvasStarted, time.Time) {
	var written *session.CanvasWritten
	var started *session.CanvasStarted
	var at time.Time
	for _, e := range session.Select(evs, session.Range{Types: []session.Type{session.TypeCanvasStarted, session.TypeCanvasWritten}}) {
		switch e.Type {
		case session.TypeCanvasWritten:
			var w session.CanvasWritten
			if e.Decode(&w) == nil && w.Reply == reply {
				written = &w
			}
		case session.TypeCanvasStarted:
			var st session.CanvasStarted
			if e.Decode(&st) == nil && st.Reply == reply {
				started, at = &st, e.CreatedAt
			}
		}
	}
	return written, started, at
}

// lookup finds the canvas of st among the bot's files created since the intent was recorded
// (a minute's leeway for clocks): "" when there is none. Canvases are files (filetype quip),
// listed by files.list; the title's key names the reply.
func (p *Part) lookup(ctx context.Context, bot string, st session.CanvasStarted, since time.Time) (string, error) {
	params := slack.GetFilesParameters{User: bot, TimestampFrom: slack.JSONTime(since.Add(-time.Minute).Unix()), Count: 100, Page: 1}
	for {
		var files []slack.File
		var paging *slack.Paging
		if err := p.call(ctx, func() (err error) {
			files, paging, err = p.Slack.GetFilesContext(ctx, params)
			return err
		}); err != nil {
			return "", err
		}
		for _, f := range files {
			if f.Title == st.Title && strings.HasSuffix(f.Title, st.Key) {
				return f.ID, nil
			}
		}
		if paging == nil || params.Page >= paging.Pages {
			return "", nil
		}
		params.Page++
	}
}

// call makes one Web API call through f, waiting out rate limits (Retry-After) a few times.
func (p *Part) call(ctx context.Context, f func() error) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = wait.Sleep
	}
	for n := 0; ; n++ {
		err := f()
		var rl *slack.RateLimitedError
		if !errors.As(err, &rl) || n >= rateLimitWaits {
			return err
		}
		if err := sleep(ctx, max(rl.RetryAfter, time.Second)); err != nil {
			return err
		}
	}
}

// transient reports a failure a later attempt may not meet: a rate limit, Slack's own
// trouble, a lost answer. Anything else Slack said (canvas_disabled_user_team, missing_scope,
// not_allowed_token_type, restricted_action, …) holds for good.
func transient(err error) bool {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout", "canvas_creation_failed":
			return true
		}
		return false
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code >= 500 || sc.Code == 429
	}
	return err != nil // the connection's: the answer may be lost
}

// Key is the stable key of reply's canvas, the end of its title: a later cell finds the
// canvas by it.
func Key(reply string) string {
	sum := sha256.Sum256([]byte("canvas:" + reply))
	return "lb-" + hex.EncodeToString(sum[:4])
}

// maxTitle is the most characters of the answer a canvas's title takes.
const maxTitle = 80

// Title is a canvas's title for the answer text: its first heading, else its first line, made
// plain (no markup, mentions or links), then the key.
func Title(text, key string) string {
	first := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "```") {
			continue
		}
		if strings.HasPrefix(line, "#") {
			first = line
			break
		}
		if first == "" {
			first = line
		}
	}
	plain := strings.Map(func(r rune) rune {
		switch {
		case strings.ContainsRune("#*_~`<>|[]!@", r):
			return -1
		case unicode.IsControl(r):
			return ' '
		}
		return r
	}, first)
	plain = clip.Text(strings.Join(strings.Fields(plain), " "), maxTitle)
	if plain == "" {
		plain = "Answer"
	}
	return plain + " · " + key
}

// inert is the model's Markdown as a canvas's content: its mentions of people and channels
// (canvas markdown's ![](@U…) and ![](#C…), Slack's <@U…>, <!here>, <!channel>) shown as text,
// so a canvas pings nobody.
func inert(md string) string {
	r := strings.NewReplacer("![](@", "![](\u200b@", "![](#", "![](\u200b#", "<!", "<\u200b!", "<@", "<\u200b@", "<#", "<\u200b#")
	return r.Replace(md)
}

// linkText is the thread's message for a reply written as canvas w: the link, then the
// answer's beginning (at most about ExcerptChars characters, cut at a line, its code block
// closed).
func linkText(w session.CanvasWritten, text string) string {
	link := "the canvas"
	if w.Permalink != "" {
		link = "[" + strings.TrimSuffix(strings.TrimSuffix(w.Title, Key(w.Reply)), " · ") + "](" + w.Permalink + ")"
	}
	head := fmt.Sprintf("📄 The whole answer (%d characters) is in %s.\n\n", w.Chars, link)
	return head + Excerpt(text, ExcerptChars)
}

// Excerpt is text's beginning, at most about n characters, cut at the end of a line (else a
// word), with "…" after it and an open code block closed.
func Excerpt(text string, n int) string {
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	cut := string([]rune(text)[:n])
	if i := strings.LastIndex(cut, "\n"); i > len(cut)/2 {
		cut = cut[:i]
	} else if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	}
	cut = strings.TrimRight(cut, " \n\t") + "\n…"
	if strings.Count(cut, "```")%2 == 1 {
		cut += "\n```"
	}
	return cut
}
