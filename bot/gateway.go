package bot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/trace"

	"github.com/logbook/logbook/bot/directory"
	"github.com/logbook/logbook/bot/telemetry"
	"github.com/logbook/logbook/session"
)

// sessionLog is the part of session.Store the gateway needs.
type sessionLog interface {
	Open(ctx context.Context, key session.ThreadKey) (session.Session, error)
	SessionByThread(ctx context.Context, key session.ThreadKey) (session.Session, error)
	SessionByMessage(ctx context.Context, channel, ts string) (session.Session, error)
	Head(ctx context.Context, id session.ID) (session.Head, error)
	Append(ctx context.Context, id session.ID, evs ...session.NewEvent) ([]session.Event, error)
	AppendBatch(ctx context.Context, items []session.Batched)
	Recent(ctx context.Context, since time.Time, limit int) ([]session.Session, error)
	Session(ctx context.Context, id session.ID) (session.Session, error)
	Events(ctx context.Context, id session.ID, r session.Range) ([]session.Event, error)
}

// GatewayConfig configures a Gateway. Zero values take defaults.
type GatewayConfig struct {
	// PrivateNote, when set, answers a mention in a private channel, group DM or DM once per
	// conversation (ephemerally) saying that logbook works in public channels only.
	PrivateNote bool
	// MaxInFlight bounds envelopes handled at once (default 64); the socket keeps being read.
	MaxInFlight int
	// Backlog bounds envelopes waiting for a handler (default 1024). The socket is read
	// whatever the handlers do (a stalled database never stops pings being answered); an
	// envelope that finds the backlog full is left unacked, and Slack delivers it again.
	Backlog int
	// HandleTimeout bounds the handling of one envelope (default 30s): an envelope whose
	// append does not finish in time is not acked, and Slack delivers it again.
	HandleTimeout time.Duration
	// AppendLanes, when > 0, groups the appends of envelopes that arrive together into one
	// transaction (group commit, groupcommit.go), with at most AppendLanes transactions in
	// flight (keep it below the gateway pool's size). 0 (the default): each envelope's
	// append is its own transaction. Off by default until TestAckCost passes with it (see
	// groupcommit.go).
	AppendLanes int
	// ChannelTTL is how long conversations.info and users.info answers are cached (default
	// 5m) when the gateway is given no directory and keeps its own.
	ChannelTTL time.Duration
	// Clock times the gateway's waits (nil: the wall clock); NewService sets it from
	// ServiceDeps.Clock.
	Clock Clock
	// SlashCommand is the command name logbook answers (default "/logbook").
	SlashCommand string
	// PublicURL is the web pages' external address (LOGBOOK_PUBLIC_URL), for the "Open
	// transcript" message shortcut; empty: the shortcut says the pages are not published.
	PublicURL string
	// CatchUp bounds the catch-up from Slack after a gap (see catchup.go). Zero values take
	// defaults.
	CatchUp CatchUpConfig
	// Approvers says who may decide approval cards; NewService sets it from
	// RunnerConfig.Approval.Approvers (LOGBOOK_TOOL_APPROVERS).
	Approvers Approvers
}

// Gateway receives Slack envelopes over Socket Mode, persists what belongs to a session, and
// acks. See the package documentation for the policy.
type Gateway struct {
	log     zerolog.Logger
	store   sessionLog
	api     slackAPI
	sm      *socketmode.Client
	me      identity
	dir     *directory.Directory
	clock   Clock
	signal  func(id session.ID, opened bool)
	metrics *Metrics
	cfg     GatewayConfig
	slash   SlashHandler
	// surfaces answer interactions and events outside turns (surface.go; Deps.Surfaces).
	surfaces []Surface
	hook     *http.Client // for response_url
	health   *Health
	gap      gap
	kick     chan struct{} // a catch-up is worth trying now
	tracer   trace.Tracer  // spans of envelopes (trace.go)
	commits  *groupCommit  // the appends of envelopes (groupcommit.go)
	// ready is closed once the runner can run the sessions of the envelopes (nil: at once);
	// the socket opens then (Run).
	ready <-chan struct{}

	notedMu sync.Mutex
	noted   map[string]bool // conversations already told "public channels only"

	// known caches thread (channel and thread ts, team left empty) → session (a mapping that
	// never changes), so an ack costs one commit. Bounded: cleared when it grows past maxKnown.
	knownMu sync.Mutex
	known   map[session.ThreadKey]session.Session
}

const maxKnown = 100_000

// readyWait bounds how long Run waits for the runner before it opens the socket.
const readyWait = 5 * time.Second

// SlashHandler answers a slash command; the returned text is sent as the ack's ephemeral
// payload.
type SlashHandler func(ctx context.Context, cmd slack.SlashCommand) string

// NewGateway returns a gateway. api is the Web API client (bot token); sm is the Socket Mode
// client (app token) built on the same slack.Client; signal wakes a session's cell
// (Runner.Stored): opened says the gateway's append stored the session's first event. The gateway
// keeps a directory of its own (NewService gives it the service's).
func NewGateway(log zerolog.Logger, store sessionLog, api *slack.Client, sm *socketmode.Client, me Identity,
	signal func(id session.ID, opened bool), metrics *Metrics, slash SlashHandler, cfg GatewayConfig) *Gateway {
	return newGateway(log, store, api, sm, me, signal, metrics, slash, nil, nil, cfg)
}

// newGateway is NewGateway that reports its appends to health (nil: to nobody) and looks
// channels and users up in dir (nil: a directory of its own, over api).
func newGateway(log zerolog.Logger, store sessionLog, api *slack.Client, sm *socketmode.Client, me Identity,
	signal func(id session.ID, opened bool), metrics *Metrics, slash SlashHandler, health *Health, dir *directory.Directory, cfg GatewayConfig) *Gateway {
	cfg.MaxInFlight = max(cfg.MaxInFlight, 0)
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = 1024
	}
	if cfg.HandleTimeout <= 0 {
		cfg.HandleTimeout = 30 * time.Second
	}
	if cfg.ChannelTTL == 0 {
		cfg.ChannelTTL = 5 * time.Minute
	}
	if cfg.SlashCommand == "" {
		cfg.SlashCommand = "/logbook"
	}
	cfg.CatchUp = cfg.CatchUp.withDefaults()
	clock := clockOr(cfg.Clock)
	if dir == nil {
		dir = directory.NewAt(api, cfg.ChannelTTL, clock.Now)
	}
	return &Gateway{
		log: log, store: store, api: api, sm: sm, signal: signal, metrics: metrics, cfg: cfg, slash: slash,
		health: health, kick: make(chan struct{}, 1), clock: clock, tracer: telemetry.Tracer(nil),
		hook:    &http.Client{Timeout: 10 * time.Second},
		commits: newGroupCommit(store, cfg.AppendLanes, cfg.HandleTimeout),
		me:      identity{Team: me.TeamID, UserID: me.UserID, BotID: me.BotID},
		dir:     dir,
		noted:   map[string]bool{},
		known:   map[session.ThreadKey]session.Session{},
	}
}

// Identity is the bot's identity in the workspace, from auth.test.
type Identity struct {
	TeamID string
	UserID string
	BotID  string
	Team   string
	User   string
	URL    string
}

// WhoAmI calls auth.test with the bot token.
func WhoAmI(ctx context.Context, api *slack.Client) (Identity, error) {
	r, err := api.AuthTestContext(ctx)
	if err != nil {
		return Identity{}, fmt.Errorf("auth.test with the bot token: %w", err)
	}
	return Identity{TeamID: r.TeamID, UserID: r.UserID, BotID: r.BotID, Team: r.Team, User: r.User, URL: r.URL}, nil
}

// Run reads envelopes until ctx ends or the Socket Mode client fails for good (bad app
// token). Envelopes in flight are finished before Run returns.
func (g *Gateway) Run(ctx context.Context) error {
	if g.ready != nil {
		// The socket opens once the runner holds its liveness claim: an envelope delivered
		// before that would have its cell wait for the claim, while Slack gives it to a
		// connected replica that can run it now (issue 33: after a restart, the first
		// messages waited up to a second). A claim that does not come (the LISTEN
		// connection fails) keeps the gateway closed for readyWait at most, on the wall
		// clock: it is the operator's bound, not a turn's.
		select {
		case <-g.ready:
		case <-ctx.Done():
			return nil
		case <-time.After(readyWait):
			g.log.Warn().Dur("waited", readyWait).Msg("the runner holds no liveness claim yet; connecting to Slack anyway")
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	smErr := make(chan error, 1)
	smDone := make(chan struct{})
	go func() {
		defer close(smDone)
		smErr <- g.sm.RunContext(ctx)
	}()

	// The read loop never waits for a handler: envelopes go to a bounded backlog that
	// MaxInFlight workers drain. Leaving the socket unread would stop pongs, and Slack would
	// drop the connection with everything in flight.
	backlog := make(chan socketmode.Event, g.cfg.Backlog)
	var wg sync.WaitGroup
	// However Run ends (ctx, a fatal socket error, a refused token), the workers and the
	// socket client are stopped first and then waited for: waiting before cancelling would
	// hang on workers that only stop with ctx.
	defer func() {
		cancel()
		wg.Wait()
		<-smDone
	}()
	if g.cfg.AppendLanes > 0 {
		g.commits.run(ctx, wg.Go, g.tracer)
	}
	wg.Go(func() { g.catchUpLoop(ctx) })
	connected := false
	for range g.cfg.MaxInFlight {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return // what is left in the backlog is unacked: Slack redelivers it
				case evt := <-backlog:
					g.handle(ctx, evt)
				}
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-smErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("socket mode: %w", err)
		case evt, ok := <-g.sm.Events:
			if !ok {
				return nil
			}
			switch evt.Type {
			case socketmode.EventTypeEventsAPI, socketmode.EventTypeSlashCommand, socketmode.EventTypeInteractive:
				if evt.Request == nil {
					continue
				}
				g.metrics.envelopes.Inc()
				select {
				case backlog <- evt:
				default:
					g.metrics.deferred.Inc()
					g.log.Warn().Str("envelope_id", evt.Request.EnvelopeID).Int("backlog", cap(backlog)).
						Msg("every handler is busy and the backlog is full; leaving the envelope unacked so Slack delivers it again")
				}
			case socketmode.EventTypeErrorBadMessage:
				g.ackBadMessage(ctx, evt)
			case socketmode.EventTypeInvalidAuth:
				return errors.New("socket mode: the app token was refused (invalid_auth): check SLACK_APP_TOKEN")
			case socketmode.EventTypeConnectionError:
				g.log.Warn().Msg("socket mode connection error; slack-go reconnects with backoff")
				g.gap.mark(time.Now())
			case socketmode.EventTypeConnected:
				g.log.Info().Msg("socket mode connected")
				if connected {
					// What Slack sent while the socket was down may be gone for good.
					g.gap.mark(time.Now())
					g.kickCatchUp()
				}
				connected = true
			case socketmode.EventTypeDisconnect:
				g.log.Info().Msg("socket mode disconnect requested; reconnecting")
				g.gap.mark(time.Now())
			default:
				// interactive and any envelope type logbook does not handle: ack, so Slack
				// does not retry it, and store nothing.
				if evt.Request != nil && evt.Request.EnvelopeID != "" {
					g.metrics.ignored.WithLabelValues("envelope_" + string(evt.Type)).Inc()
					g.ack(g.log, *evt.Request, nil)
				}
			}
		}
	}
}

func (g *Gateway) handle(ctx context.Context, evt socketmode.Event) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.HandleTimeout)
	defer cancel()
	req := *evt.Request
	ctx, span := g.startEnvelope(ctx, evt)
	defer span.End()
	log := g.log.With().Ctx(ctx).Str("envelope_id", req.EnvelopeID).Logger()
	switch evt.Type {
	case socketmode.EventTypeSlashCommand:
		g.slashCommand(ctx, log, req, evt)
		return
	case socketmode.EventTypeInteractive:
		g.interactive(ctx, log, req, evt)
		return
	}
	ev, ok := evt.Data.(slackevents.EventsAPIEvent)
	if !ok {
		g.ack(log, req, nil)
		return
	}
	if stop, ok := ev.InnerEvent.Data.(*slackevents.AgentSessionStoppedEvent); ok {
		g.requestStop(ctx, log, req, ev.TeamID, stop.Channel, stop.ThreadTimestamp, stop.User, "button", stop.EventTimestamp)
		return
	}
	if g.channelChanged(log, req, ev) {
		return
	}
	if r, ok := ev.InnerEvent.Data.(*slackevents.ReactionAddedEvent); ok {
		g.stopReaction(ctx, log, req, ev.TeamID, r)
		return
	}
	in, ok := inboundFromEvent(ev, req.RetryAttempt)
	in.Team = envelopeTeams(req.Payload, ev.TeamID).owner()
	if !ok {
		g.ack(log, req, nil)
		if !g.surfaceEvent(ctx, ev) {
			g.metrics.ignored.WithLabelValues("event_" + ev.InnerEvent.Type).Inc()
		}
		return
	}
	log = log.With().Str("channel", in.Channel).Str("slack_event_id", in.EventID).Logger()
	if _, err := g.process(ctx, log, in); err != nil {
		if unstorable(err) {
			// No redelivery can change this: ack, count it, keep no content.
			g.metrics.ignored.WithLabelValues("unstorable").Inc()
			log.Warn().Err(err).Msg("acking an event that can never be stored")
			g.ack(log, req, nil)
			return
		}
		// Not acked: Slack delivers the envelope again.
		envelopeFailed(ctx)
		g.metrics.persistFailures.Inc()
		log.Error().Err(err).Msg("could not persist the event; not acking so Slack redelivers it")
		return
	}
	g.ack(log, req, nil)
}

// slashCommand acks a slash command at once (Slack allows 3 s, and a search may take
// longer) and answers it through its response_url. Without a response_url the answer rides
// on the ack, as before.
func (g *Gateway) slashCommand(ctx context.Context, log zerolog.Logger, req socketmode.Request, evt socketmode.Event) {
	cmd, ok := evt.Data.(slack.SlashCommand)
	if !ok || g.slash == nil {
		g.ack(log, req, nil)
		return
	}
	if cmd.ResponseURL == "" {
		g.ack(log, req, map[string]string{"response_type": "ephemeral", "text": g.slash(ctx, cmd)})
		return
	}
	g.ack(log, req, nil)
	text := g.slash(ctx, cmd)
	if err := slack.PostWebhookCustomHTTPContext(ctx, cmd.ResponseURL, g.hook,
		&slack.WebhookMessage{ResponseType: "ephemeral", Text: text}); err != nil {
		log.Warn().Str("error", withoutURL(err)).Str("command", cmd.Command).Msg("answer a slash command through its response_url")
	}
}

// StopReaction is the reaction that stops a running turn when anyone adds it to a message of
// the thread.
const StopReaction = "octagonal_sign"

// stopReaction turns the stop reaction on any message of a session's thread into a stop
// request; other reactions are acked and ignored.
func (g *Gateway) stopReaction(ctx context.Context, log zerolog.Logger, req socketmode.Request, team string, r *slackevents.ReactionAddedEvent) {
	if r.Reaction != StopReaction || r.Item.Type != "message" || r.Item.Channel == "" || r.Item.Timestamp == "" {
		g.metrics.ignored.WithLabelValues("reaction").Inc()
		g.ack(log, req, nil)
		return
	}
	// The reaction names the message, not its thread: the message is the thread's parent, or
	// Slack says which thread it is in.
	thread := r.Item.Timestamp
	if msgs, _, _, err := g.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: r.Item.Channel, Timestamp: r.Item.Timestamp, Limit: 1}); err == nil && len(msgs) > 0 && msgs[0].ThreadTimestamp != "" {
		thread = msgs[0].ThreadTimestamp
	}
	g.requestStop(ctx, log, req, team, r.Item.Channel, thread, r.User, "reaction", r.EventTimestamp)
}

// requestStop records a person's stop request (the stop button, the stop reaction) in the
// thread's session and signals it: whichever replica runs the turn stops it. It acks once the
// request is stored; a thread that is no session is acked and ignored.
func (g *Gateway) requestStop(ctx context.Context, log zerolog.Logger, req socketmode.Request, team, channel, thread, user, source, eventTS string) {
	team = cmp.Or(team, g.me.Team)
	sess, err := g.session(ctx, session.ThreadKey{Team: team, Channel: channel, ThreadTS: thread}, false)
	if errors.Is(err, session.ErrNotFound) || user == "" || user == g.me.UserID {
		g.metrics.ignored.WithLabelValues("stop_no_session").Inc()
		g.ack(log, req, nil)
		return
	}
	if err == nil {
		// The name is for the model's note on the stopped turn ("Grace stopped this turn").
		name := g.dir.UserName(ctx, user)
		if name == user {
			name = ""
		}
		_, err = g.store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeStopRequested,
			Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: "stop/" + channel + "/" + cmp.Or(eventTS, thread),
			Payload: session.StopRequested{Source: source, UserName: name}})
	}
	if err != nil {
		g.metrics.persistFailures.Inc()
		log.Error().Err(err).Msg("could not store a stop request; not acking so Slack redelivers it")
		return
	}
	g.ack(log, req, nil)
	g.signal(sess.ID, false)
}

// withoutURL is err's text without the URL a net/http error names: a response_url is a
// short-lived credential that can post to the channel, and must not reach a log.
func withoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " response_url: " + ue.Err.Error()
	}
	return err.Error()
}

// TranscriptShortcut is the callback_id of the "Open transcript" message shortcut (in the
// app manifest): on any message of a session's thread it answers, to the person only, with
// the link to the session's web transcript — the thread a slash command cannot name.
const TranscriptShortcut = "open_transcript"

// interactive acks an interactive envelope at once (Slack allows 3 s) and answers the message
// shortcuts logbook has and the approval cards' buttons (decide.go); other interactions are
// acked and ignored.
func (g *Gateway) interactive(ctx context.Context, log zerolog.Logger, req socketmode.Request, evt socketmode.Event) {
	cb, ok := evt.Data.(slack.InteractionCallback)
	if ok && cb.Type == slack.InteractionTypeBlockActions {
		for _, a := range cb.ActionCallback.BlockActions {
			if a != nil && (a.ActionID == ActionApprove || a.ActionID == ActionDeny || a.ActionID == ActionGrant) {
				g.decide(ctx, log, req, cb, a) // acks once the decision is stored
				return
			}
		}
	}
	g.ack(log, req, nil)
	if ok && g.surfaceInteraction(ctx, cb) {
		return
	}
	if !ok || cb.Type != slack.InteractionTypeMessageAction || cb.CallbackID != TranscriptShortcut || cb.ResponseURL == "" {
		g.metrics.ignored.WithLabelValues("interaction").Inc()
		return
	}
	text := g.transcriptLink(ctx, cb)
	if err := slack.PostWebhookCustomHTTPContext(ctx, cb.ResponseURL, g.hook,
		&slack.WebhookMessage{ResponseType: "ephemeral", Text: text}); err != nil {
		log.Warn().Str("error", withoutURL(err)).Msg("answer the transcript shortcut through its response_url")
	}
}

// transcriptLink is the answer to the transcript shortcut on a message.
func (g *Gateway) transcriptLink(ctx context.Context, cb slack.InteractionCallback) string {
	thread := cmp.Or(cb.Message.ThreadTimestamp, cb.Message.Timestamp, cb.MessageTs)
	team := cmp.Or(cb.Team.ID, g.me.Team)
	in := inbound{Team: team, Channel: cb.Channel.ID, ChannelType: "", User: cb.User.ID}
	if public, err := g.public(ctx, in); err != nil {
		return "I could not check this channel right now; try again in a moment."
	} else if !public {
		return "logbook keeps no record of private channels, group DMs or DMs."
	}
	// A thread is found by its channel and ts: the clicker's team may be either organisation
	// of a Slack Connect channel.
	sess, err := g.session(ctx, session.ThreadKey{Team: team, Channel: cb.Channel.ID, ThreadTS: thread}, false)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return "This thread is not a logbook session: mention me in a public channel to start one."
	case err != nil:
		return "I could not look this thread up right now; try again in a moment."
	case g.cfg.PublicURL == "":
		return "This thread is session " + sess.ID.String() + ". logbook's web pages have no public address " +
			"(LOGBOOK_PUBLIC_URL); an operator can print it with `logbook transcript " + sess.ID.String() + "`."
	}
	return "<" + TranscriptURL(g.cfg.PublicURL, sess.ID) + "|Open this thread's transcript>"
}

func (g *Gateway) ack(log zerolog.Logger, req socketmode.Request, payload any) {
	// The ack queue is bounded; never wait on it forever (a stopped client drains nothing).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.sm.AckCtx(ctx, req.EnvelopeID, payload)
	if err != nil {
		log.Warn().Err(err).Msg("ack")
		return
	}
	g.metrics.acks.Inc()
}

// unstorable reports errors that a redelivery of the same envelope cannot change.
func unstorable(err error) bool {
	var tooLarge *session.TooLargeError
	if errors.Is(err, session.ErrInvalidEvent) || errors.Is(err, session.ErrInvalidPayload) ||
		errors.Is(err, session.ErrUnknownType) || errors.As(err, &tooLarge) {
		return true
	}
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && (se.Err == "channel_not_found" || se.Err == "missing_scope")
}

// ackBadMessage acks an envelope slack-go could not decode (an inner event type it does not
// know, a malformed payload), so Slack does not retry it three times.
func (g *Gateway) ackBadMessage(ctx context.Context, evt socketmode.Event) {
	bad, ok := evt.Data.(*socketmode.ErrorBadMessage)
	if !ok {
		return
	}
	var env struct {
		EnvelopeID string `json:"envelope_id"`
		Type       string `json:"type"`
	}
	if err := json.Unmarshal(bad.Message, &env); err != nil || env.EnvelopeID == "" {
		g.log.Warn().Str("cause", fmt.Sprint(bad.Cause)).Msg("unusable socket mode frame without envelope id")
		return
	}
	g.metrics.ignored.WithLabelValues("undecodable").Inc()
	g.log.Warn().Str("envelope_id", env.EnvelopeID).Str("type", env.Type).Str("cause", fmt.Sprint(bad.Cause)).
		Msg("acking an envelope slack-go could not decode")
	if err := g.sm.AckCtx(ctx, env.EnvelopeID, nil); err != nil {
		g.log.Warn().Err(err).Msg("ack")
	}
}

// process persists what in means. A nil error means the envelope may be acked; fresh reports
// that something not stored before was appended. Its phases: decide, find the session, build
// the events, append.
func (g *Gateway) process(ctx context.Context, log zerolog.Logger, in inbound) (fresh bool, err error) {
	d := Classify(in, g.me)
	if d.Action == actIgnore {
		g.metrics.ignored.WithLabelValues(d.Reason).Inc()
		return false, nil
	}
	public, err := g.public(ctx, in)
	if err != nil {
		return false, err
	}
	if !public {
		g.metrics.ignored.WithLabelValues("not_public").Inc()
		if d.Mentioned {
			g.notePrivate(ctx, log, in)
		}
		return false, nil
	}
	team := cmp.Or(in.Team, g.me.Team)
	sess, err := g.sessionOf(ctx, team, in, d)
	if errors.Is(err, session.ErrNotFound) {
		g.metrics.ignored.WithLabelValues("no_session").Inc()
		return false, nil
	}
	if err != nil {
		g.logFailed(time.Now())
		return false, err
	}
	log = log.With().Str("session_id", sess.ID.String()).Logger()
	evs := g.eventsOf(ctx, log, in, d, sess)
	stored, err := g.commits.append(ctx, sess.ID, evs)
	if err != nil {
		g.logFailed(time.Now())
		return false, err
	}
	g.health.appendSucceeded()
	g.metrics.appends.Add(float64(len(stored)))
	if !slices.ContainsFunc(stored, func(e session.Event) bool { return !e.Duplicate }) {
		g.metrics.duplicates.Inc()
		log.Debug().Int("retry_attempt", in.RetryAttempt).Msg("duplicate delivery of a stored message")
		if d.Action == actMessage && in.RetryAttempt > 0 {
			// Slack delivers again what was not acked: the replica that stored it may have
			// died before it acked — and before it signalled the session. Signal it now (one
			// statement at most), or the message waits for a poll, or behind an idle cell on
			// a live replica (the poll skips sessions whose cell runs) for its idle timeout.
			g.signal(sess.ID, false)
		}
		return false, nil
	}
	if d.Action == actMessage {
		g.signal(sess.ID, opens(stored))
	}
	return true, nil
}

// opens reports whether stored (one append's events) began the session's log. A mention fires
// two envelopes (message and app_mention), handled at once: the one whose Open created the
// session need not be the one whose append stores the message first. Either way, before the
// log's first event no replica was signalled and no poll found work in the session, so no
// cell can hold its lease yet: the cell starts here with no NotifyOwner round trip.
func opens(stored []session.Event) bool {
	return slices.ContainsFunc(stored, func(e session.Event) bool { return !e.Duplicate && e.Seq == 1 })
}

// sessionOf returns the session the event belongs to (opening it for a mention that starts
// one), or ErrNotFound when it belongs to none.
func (g *Gateway) sessionOf(ctx context.Context, team string, in inbound, d decision) (session.Session, error) {
	key := session.ThreadKey{Team: team, Channel: in.Channel, ThreadTS: d.ThreadTS}
	sess, err := g.session(ctx, key, d.Action == actMessage && d.Start)
	if errors.Is(err, session.ErrNotFound) && d.Action == actMessage && justPosted(d.ThreadTS, g.clock.Now()) {
		// Envelopes are handled concurrently: a quick reply can be handled while its thread's
		// opening mention is still being stored.
		return g.awaitSession(ctx, key)
	}
	if errors.Is(err, session.ErrNotFound) && d.Action == actDelete && in.Previous == nil {
		// The deletion does not say which thread the message was in: find the session that
		// stored it.
		return g.store.SessionByMessage(ctx, in.Channel, d.TS)
	}
	return sess, err
}

// sessionWaits are the waits before each further look for a thread whose opening mention is
// still being stored: 300 ms in all (the single wait it replaces), well inside the 3 s Slack
// gives an ack; a mention stored quickly is found after 50 ms.
var sessionWaits = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}

// awaitSession looks for the thread's session again after each of sessionWaits, on the
// gateway's clock, until it is found, the looks run out (ErrNotFound) or ctx ends.
func (g *Gateway) awaitSession(ctx context.Context, key session.ThreadKey) (session.Session, error) {
	for _, wait := range sessionWaits {
		select {
		case <-ctx.Done():
			return session.Session{}, ctx.Err()
		case <-g.clock.After(wait):
		}
		sess, err := g.session(ctx, key, false)
		if !errors.Is(err, session.ErrNotFound) {
			return sess, err
		}
	}
	return session.Session{}, fmt.Errorf("session of thread %s after %d looks: %w", key.ThreadTS, len(sessionWaits)+1, session.ErrNotFound)
}

// eventsOf builds the events that record in, in session sess.
//
// A message's idempotency key is its session's team (the channel's owner as first recorded),
// channel and ts, whichever organisation's envelope or read-back delivered it: one key per
// message per thread.
func (g *Gateway) eventsOf(ctx context.Context, log zerolog.Logger, in inbound, d decision, sess session.Session) []session.NewEvent {
	actor := session.Actor{Kind: session.ActorUser, ID: in.User}
	team := sess.Key.Team
	prefix := team + "/" + in.Channel + "/"
	switch d.Action {
	case actMessage:
		text, raw, names := g.readable(ctx, in.Text, in.Blocks)
		traceID, spanID := telemetry.IDs(ctx)
		evs := []session.NewEvent{{
			Type: session.TypeUserMessage, Actor: actor, IdempotencyKey: prefix + in.TS,
			Payload: session.UserMessage{
				Team: cmp.Or(in.UserTeam, team), Channel: in.Channel, ThreadTS: d.ThreadTS, TS: in.TS, User: in.User,
				UserName: g.dir.UserName(ctx, in.User), Text: text, Raw: raw, Names: names,
				SlackEventID: in.EventID, Mentioned: d.Mentioned, TraceID: traceID, SpanID: spanID,
			},
		}}
		evs = append(evs, fileRefs(prefix, in.TS, in.User, in.Files)...)
		if d.Start && (in.RetryAttempt > 0 || d.ThreadTS != in.TS) && g.emptySession(ctx, sess) {
			// A session opened late — a redelivered mention, or a mention inside a thread
			// people already wrote in — first takes in the thread's earlier messages (and any
			// reply that arrived before it and was not stored), in Slack's order, in the same
			// append as the mention.
			evs = g.withThread(ctx, log, sess, in.TS, evs)
		}
		return evs
	case actEdit:
		m := in.Changed
		text, raw, _ := g.readable(ctx, m.Text, m.Blocks)
		editTS := in.TS
		if m.Edited != nil && m.Edited.Timestamp != "" {
			editTS = m.Edited.Timestamp
		}
		actor.ID = m.User
		return []session.NewEvent{{
			Type: session.TypeUserMessageEdited, Actor: actor, IdempotencyKey: prefix + d.TS + "/edit/" + editTS,
			Payload: session.UserMessageEdited{OrigTS: d.TS, EditTS: editTS, User: m.User, Text: text, Raw: raw},
		}}
	default: // actDelete
		user := ""
		if in.Previous != nil {
			user = in.Previous.User
		}
		if user == "" {
			actor = session.Actor{Kind: session.ActorSystem, ID: "slack"}
		} else {
			actor.ID = user
		}
		return []session.NewEvent{{
			Type: session.TypeUserMessageDeleted, Actor: actor, IdempotencyKey: prefix + d.TS + "/deleted",
			Payload: session.UserMessageDeleted{DeletedTS: d.TS, User: user},
		}}
	}
}

// logFailed records that the log could not be read or written at t: the replica is unready,
// and what Slack sent meanwhile is caught up once the log is back.
func (g *Gateway) logFailed(t time.Time) {
	g.health.appendFailed()
	g.gap.mark(t)
}

// emptySession reports whether the session has no events yet: it was just opened, or opened
// by a delivery whose append failed.
func (g *Gateway) emptySession(ctx context.Context, sess session.Session) bool {
	if sess.Created {
		return true
	}
	h, err := g.store.Head(ctx, sess.ID)
	return err == nil && h.Seq == 0
}

// withThread returns evs (the message at ts and its files) merged, in Slack ts order, with the
// human messages of the session's thread that are not it. The thread is read with a short
// deadline: the envelope waits for it. On failure the thread's earlier messages are left out
// (logged) rather than the message delayed past Slack's ack window.
func (g *Gateway) withThread(ctx context.Context, log zerolog.Logger, sess session.Session, ts string, evs []session.NewEvent) []session.NewEvent {
	ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	key := sess.Key
	prefix := key.Team + "/" + key.Channel + "/"
	type msg struct {
		ts  string
		evs []session.NewEvent
	}
	var thread []msg
	cursor := ""
	for page, limited := 0, 0; page < 5; page++ {
		msgs, more, next, err := g.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: key.Channel, Timestamp: key.ThreadTS, Cursor: cursor, Limit: 200})
		if wait, ok := rateLimited(err); ok && limited < 2 {
			// A rate limit posted nothing: wait it out if the ack can still afford it.
			limited++
			if deadline, _ := ctx.Deadline(); time.Now().Add(cmp.Or(wait, time.Second)).Before(deadline) {
				select {
				case <-ctx.Done():
				case <-time.After(cmp.Or(wait, time.Second)):
					page--
					continue
				}
			}
		}
		if err != nil {
			log.Warn().Err(err).Msg("read the thread of a late-opened session; its earlier messages are left out")
			break
		}
		for _, m := range msgs {
			in := inboundFromMessage(key.Team, key.Channel, "channel", m)
			if m.Timestamp == ts || Classify(in, g.me).Action != actMessage {
				continue
			}
			text, raw, names := g.readable(ctx, m.Text, m.Blocks)
			thread = append(thread, msg{ts: m.Timestamp, evs: append([]session.NewEvent{{
				Type: session.TypeUserMessage, Actor: session.Actor{Kind: session.ActorUser, ID: m.User}, IdempotencyKey: prefix + m.Timestamp,
				Payload: session.UserMessage{Team: key.Team, Channel: key.Channel, ThreadTS: key.ThreadTS, TS: m.Timestamp, User: m.User,
					UserName: g.dir.UserName(ctx, m.User), Text: text, Raw: raw, Names: names},
			}}, fileRefs(prefix, m.Timestamp, m.User, m.Files)...)})
		}
		if !more || next == "" {
			break
		}
		cursor = next
	}
	if len(thread) == 0 {
		return evs
	}
	var out []session.NewEvent
	placed := false
	for _, m := range thread {
		if !placed && tsLess(ts, m.ts) {
			out, placed = append(out, evs...), true
		}
		out = append(out, m.evs...)
	}
	if !placed {
		out = append(out, evs...)
	}
	return out
}

// fileRefs are the file_ref events of the files a message (ts, by user) shares.
func fileRefs(prefix, ts, user string, files []slack.File) []session.NewEvent {
	var evs []session.NewEvent
	for _, f := range files {
		if f.ID == "" {
			continue
		}
		evs = append(evs, session.NewEvent{
			Type: session.TypeFileRef, Actor: session.Actor{Kind: session.ActorUser, ID: user}, IdempotencyKey: prefix + ts + "/file/" + f.ID,
			Payload: session.FileRef{FileID: f.ID, Name: f.Name, Title: f.Title, Mimetype: f.Mimetype,
				Size: int64(f.Size), Permalink: f.Permalink, URL: cmp.Or(f.URLPrivateDownload, f.URLPrivate), TS: ts, User: user,
				Access: f.FileAccess},
		})
	}
	return evs
}

// justPosted reports whether the Slack ts is less than 30 seconds old.
func justPosted(ts string, now time.Time) bool {
	secs, _, _ := strings.Cut(ts, ".")
	n, err := strconv.ParseInt(secs, 10, 64)
	return err == nil && now.Sub(time.Unix(n, 0)) < 30*time.Second
}

// tsLess orders Slack timestamps ("1700000000.000100"): seconds, then the fraction.
func tsLess(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	if as != bs {
		return as < bs
	}
	return af < bf
}

// session returns the thread's session, opening it when open is set (else ErrNotFound when
// it has none).
func (g *Gateway) session(ctx context.Context, key session.ThreadKey, open bool) (session.Session, error) {
	thread := session.ThreadKey{Channel: key.Channel, ThreadTS: key.ThreadTS}
	g.knownMu.Lock()
	sess, ok := g.known[thread]
	g.knownMu.Unlock()
	if ok {
		return sess, nil
	}
	var err error
	if open {
		sess, err = g.store.Open(ctx, key)
	} else {
		sess, err = g.store.SessionByThread(ctx, key)
	}
	if err != nil {
		return sess, err
	}
	g.knownMu.Lock()
	if len(g.known) >= maxKnown {
		clear(g.known)
	}
	cached := sess
	cached.Created = false // only this caller created it
	g.known[thread] = cached
	g.knownMu.Unlock()
	return sess, nil
}

// public reports whether the event's conversation is a public channel: from the message's
// channel_type when present, otherwise from conversations.info (cached).
func (g *Gateway) public(ctx context.Context, in inbound) (bool, error) {
	if in.ChannelType != "" {
		pub := in.ChannelType == "channel"
		g.dir.Remember(in.Channel, pub)
		return pub, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	k, err := g.dir.Channel(ctx, in.Channel)
	if err != nil {
		return false, err
	}
	return k.Public, nil
}

func (g *Gateway) notePrivate(ctx context.Context, log zerolog.Logger, in inbound) {
	if !g.cfg.PrivateNote {
		return
	}
	g.notedMu.Lock()
	done := g.noted[in.Channel]
	g.noted[in.Channel] = true
	g.notedMu.Unlock()
	if done {
		return
	}
	_, err := g.api.PostEphemeralContext(ctx, in.Channel, in.User,
		slack.MsgOptionText("logbook only works in public channels, where every thread is a searchable record. Nothing here was stored.", false))
	if err != nil {
		log.Info().Err(err).Msg("could not post the public-channels-only note")
	}
}

// channelChanged handles an event that changes a channel's visibility: ok false when ev is
// none. It acks once the directory has forgotten the channel.
func (g *Gateway) channelChanged(log zerolog.Logger, req socketmode.Request, ev slackevents.EventsAPIEvent) bool {
	channel, private := "", false
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.MessageEvent:
		switch e.SubType {
		case "channel_convert_to_private":
			channel, private = e.Channel, true
		case "channel_convert_to_public":
			channel = e.Channel
		default:
			return false
		}
	case *slackevents.ChannelSharedEvent:
		channel = e.Channel
	case *slackevents.ChannelUnsharedEvent:
		channel = e.Channel
	case *slackevents.ChannelArchiveEvent:
		channel = e.Channel
	case *slackevents.ChannelDeletedEvent:
		channel, private = e.Channel, true
	case *slackevents.MemberLeftChannelEvent:
		if e.User != g.me.UserID {
			return false
		}
		channel = e.Channel
	default:
		return false
	}
	if channel != "" {
		g.dir.Forget(channel, private)
		g.metrics.ignored.WithLabelValues("visibility_" + ev.InnerEvent.Type).Inc()
		log.Info().Str("channel", channel).Str("event", ev.InnerEvent.Type).Bool("private", private).
			Msg("a channel's visibility changed; every surface decides it afresh")
	}
	g.ack(log, req, nil)
	return true
}
