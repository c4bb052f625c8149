// Package schedule runs sessions on a schedule (issue 32): `/logbook schedule add "<cron
// spec>" <prompt>` (LOGBOOK_ADMINS), `list` and `remove <id>`. Each tick posts one top-level
// message in the schedule's channel, saying which schedule and who set it, and runs a session
// on it (bot.Starter), exactly once per tick across replicas.
//
// # Exactly once
//
// Every replica runs a Scheduler. Each pass (Config.Poll) it reads the schedules and, for
// each, the ticks due since its newest claimed one, and claims each due tick in the database
// (session.Store.ClaimTick: the primary key (schedule, tick) lets one replica have it, under a
// per-schedule lock that keeps claims in order), with an attempt that is its own until
// Config.ClaimTTL. The owner posts the tick (its metadata names the tick), opens the post's
// session and records the run (session.Store.TickRan). A replica that dies between the claim
// and the record leaves an attempt that expires; the next pass of any replica takes the tick
// over with a new attempt (session.Store.RetryTicks: one replica gets it), which finds the
// earlier attempt's post in the log (bot.Starter records "posting" before chat.postMessage and
// the ts after) and uses it. So a tick is not lost, nor posted twice, by a crash or a restart
// during it (bot/start.go says what the one narrow window is).
//
// # Missed ticks
//
// A tick that comes due while no replica runs (or the database is down) is missed. When a
// replica is back, the ticks due more than Config.Grace ago are not replayed: only the newest
// of them runs, once, late — its post says it is late, when it was due, how late it runs and
// why, and how many earlier ticks were skipped — and the ticks still within their grace run as
// usual. logbook_schedule_ticks_late_total and logbook_schedule_ticks_missed_total count them.
//
// # Pausing
//
// Every tick that ends is a run (session.Store.RecordRun): ran, or failed — refused by Slack
// for good, or out of attempts. Config.MaxFailures failed in a row (LOGBOOK_AUTOMATION_MAX_FAILURES)
// pause the schedule: recorded (session.Store.PauseAutomation, once across replicas; it
// survives restarts) and said in its channel, naming the admins who may resume it with
// `/logbook schedule resume <id>`. A paused schedule claims no tick; resumed, it ticks on from
// the resume, the ticks due while it was paused not run late. `/logbook schedule resume hook
// <name>` resumes a hook that paused itself (bot/hooks) the same way.
//
// # Specs
//
// robfig/cron syntax: five fields, or six with seconds first; descriptors (@hourly, @daily,
// @every 4s, ...); a CRON_TZ=Zone prefix. A schedule whose ticks come closer together than
// Config.MinInterval (LOGBOOK_SCHEDULE_MIN_INTERVAL, default 1s: any interval) is refused, as
// are @every under one second and a time zone with no fields after it; a channel holds at
// most MaxPerChannel schedules, and one the bot cannot post in (Config.Slack) none.
//
// # Clocks, actors, failures
//
// Time is the database's (Store.Now), never a replica's own clock. A tick's first message is
// the system's (schedule/<id>), the admin who set it in its payload (set_by); a schedule whose
// admin is no longer in Config.Admins stops at its next tick (recorded, removed by system). A
// post Slack refuses for good (bot.Permanent) makes its tick final: recorded failed, no retry.
package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/robfig/cron/v3"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/audit/cronspec"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// MetadataEventType is the event_type of a tick's post's message metadata; its payload's id
// is the tick's (session.Tick.ID).
const MetadataEventType = "logbook_schedule_tick"

// Store keeps schedules and their ticks (*session.Store).
type Store interface {
	// Now is the database's clock: which ticks are due, when an attempt expires and whether
	// a tick is late are decided by it, never by a replica's own clock.
	Now(ctx context.Context) (time.Time, error)
	StopSchedule(ctx context.Context, team string, id int64, reason string) error
	TickFailed(ctx context.Context, t session.Tick, why string) error
	AddSchedule(ctx context.Context, sc session.Schedule) (session.Schedule, error)
	RemoveSchedule(ctx context.Context, team string, id int64, who string) (time.Time, error)
	Schedules(ctx context.Context, team, channel string, withRemoved bool) ([]session.Schedule, error)
	ClaimTick(ctx context.Context, t session.Tick, owner string, expires time.Time) (session.Tick, bool, error)
	RetryTicks(ctx context.Context, owner string, now, since, expires time.Time) ([]session.Tick, error)
	TickRan(ctx context.Context, t session.Tick, ts string, id session.ID, found bool) error
	RecordRun(ctx context.Context, r session.AutomationRun) (session.AutomationRun, int, error)
	PauseAutomation(ctx context.Context, p session.Pause) (session.Pause, bool, error)
	ResumeAutomation(ctx context.Context, p session.Pause) (session.Pause, error)
	Pauses(ctx context.Context, kind string) (map[string]session.Pause, error)
	AutomationRuns(ctx context.Context, f session.RunFilter) ([]session.AutomationRun, error)
}

// Starter starts a tick's session (*bot.Starter).
type Starter interface {
	Start(ctx context.Context, o bot.Opening) (bot.Started, error)
}

// Config configures a Scheduler. Zero values take defaults.
type Config struct {
	// Owner names this replica in the tick records (default host:pid-like, required to
	// differ between replicas; serve passes the runner's owner name).
	Owner string
	// Team is the workspace's team id.
	Team string
	// Admins may add and remove schedules (LOGBOOK_ADMINS).
	Admins []string
	// Poll is the longest wait between two looks at the schedules (default 10s). A pass waits
	// only until the next tick of the schedules it read, and a schedule added or resumed on
	// this replica is looked at at once; Poll bounds how late a schedule added on another
	// replica, or a tick a dead replica left, is first seen (well within Grace). Issue 53: a
	// pass every second was four statements a second on every idle replica.
	Poll time.Duration
	// Grace is how late a tick may run and still be on time (default 30s); see Missed ticks.
	Grace time.Duration
	// ClaimTTL is how long an attempt at a tick is its replica's (default 30s, serve:
	// LOGBOOK_LEASE_TTL); a replica that dies mid-tick leaves it to the others for this long.
	ClaimTTL time.Duration
	// MinInterval is the least time between two ticks of a schedule (default 1s).
	MinInterval time.Duration
	// Slack, when set, is asked about a channel when a schedule is added there: one the bot
	// is not a member of, that is archived, or that is shared with another organisation
	// (Slack Connect) is refused.
	Slack ChannelInfo
	// Names gives a Slack user's display name (nil: the id).
	Names func(ctx context.Context, user string) string
	// MaxFailures is how many ticks of a schedule may fail in a row before it pauses itself
	// (LOGBOOK_AUTOMATION_MAX_FAILURES, default 3); see Pausing.
	MaxFailures int
	// Poster posts a paused schedule's notice in its channel (*slack.Client); nil: the pause
	// is recorded and logged only.
	Poster Poster
	// Hooks are the configured hooks' channels by name (LOGBOOK_HOOKS): /logbook schedule
	// list shows a channel's hooks with their runs, and resume takes a paused hook.
	Hooks map[string]string
	// PublicURL is the web pages' address (LOGBOOK_PUBLIC_URL): a run in /logbook schedule
	// list links its transcript there ("": the session id).
	PublicURL string
	// Registerer gets logbook_schedule_ticks_late_total and
	// logbook_schedule_ticks_missed_total (nil: not registered).
	Registerer prometheus.Registerer
	Clock      bot.Clock // nil: the wall clock
	Log        zerolog.Logger
}

// Poster posts a message (*slack.Client).
type Poster interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
}

// ChannelInfo reads a channel (*slack.Client).
type ChannelInfo interface {
	GetConversationInfoContext(ctx context.Context, input *slack.GetConversationInfoInput) (*slack.Channel, error)
}

// Scheduler runs the schedules' ticks; see the package doc.
type Scheduler struct {
	store   Store
	starter Starter
	cfg     Config
	clock   bot.Clock

	late, missed prometheus.Counter

	mu    sync.Mutex
	specs map[string]cron.Schedule
	// changed asks Run for a pass now: a schedule was added or resumed here.
	changed chan struct{}
}

// New returns a Scheduler; it contacts nothing until Run.
func New(store Store, starter Starter, cfg Config) *Scheduler {
	cfg.Poll = cmp.Or(cfg.Poll, 10*time.Second)
	cfg.Grace = cmp.Or(cfg.Grace, 30*time.Second)
	cfg.ClaimTTL = cmp.Or(cfg.ClaimTTL, 30*time.Second)
	cfg.MinInterval = cmp.Or(cfg.MinInterval, time.Second)
	cfg.Owner = cmp.Or(cfg.Owner, "logbook")
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, 3)
	if cfg.Names == nil {
		cfg.Names = func(_ context.Context, user string) string { return user }
	}
	var clock bot.Clock = wall{}
	if cfg.Clock != nil {
		clock = cfg.Clock
	}
	s := &Scheduler{store: store, starter: starter, cfg: cfg, clock: clock, specs: map[string]cron.Schedule{}, changed: make(chan struct{}, 1),
		late: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "logbook", Name: "schedule_ticks_late_total",
			Help: "Schedule ticks that ran later than LOGBOOK_SCHEDULE_GRACE (each said late in its channel)."}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "logbook", Name: "schedule_ticks_missed_total",
			Help: "Schedule ticks skipped because a later tick of the same outage ran in their place."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.late, s.missed)
	}
	return s
}

// Late is how many ticks ran after their grace (logbook_schedule_ticks_late_total), and
// Missed how many were skipped for a later one (logbook_schedule_ticks_missed_total), as this
// replica counted them.
func (s *Scheduler) Late() float64   { return counterValue(s.late) }
func (s *Scheduler) Missed() float64 { return counterValue(s.missed) }

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

type wall struct{}

func (wall) Now() time.Time                         { return time.Now() }
func (wall) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Parse parses a cron spec as schedules take it (see Specs in the package doc). It refuses,
// with an error, what robfig/cron would panic on (a TZ=/CRON_TZ= prefix with no fields after
// it) and an @every interval under one second (zero and negative ones included, which cron
// would round up to a second); a panic of the parser on any other input is an error too.
func Parse(spec string) (c cron.Schedule, err error) {
	spec = strings.TrimSpace(spec)
	fields := spec
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		_, rest, ok := strings.Cut(spec, " ")
		if fields = strings.TrimSpace(rest); !ok || fields == "" {
			return nil, fmt.Errorf("cron spec %q: a time zone must be followed by a space and the spec's fields", spec)
		}
	}
	if every, ok := strings.CutPrefix(fields, "@every "); ok {
		if d, perr := time.ParseDuration(strings.TrimSpace(every)); perr == nil && d < time.Second {
			return nil, fmt.Errorf("cron spec %q: @every takes an interval of at least 1s", spec)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("cron spec %q cannot be read", spec)
		}
	}()
	// On the wall clock of the spec's zone (UTC without CRON_TZ, whatever the replica's TZ):
	// a DST change neither skips nor doubles a tick.
	c, err = cronspec.Parse(spec, time.UTC)
	if err != nil {
		return nil, fmt.Errorf("cron spec %q: %w", spec, err)
	}
	return c, nil
}

// Check parses spec and refuses one whose ticks, from now, come closer together than min.
func Check(spec string, now time.Time, minInterval time.Duration) (cron.Schedule, error) {
	s, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	first := s.Next(now)
	if first.IsZero() {
		return nil, fmt.Errorf("cron spec %q never fires", spec)
	}
	t := first
	for range 10 {
		n := s.Next(t)
		if n.IsZero() {
			break
		}
		if n.Sub(t) < minInterval {
			return nil, fmt.Errorf("cron spec %q fires every %v; the least interval here is %v (LOGBOOK_SCHEDULE_MIN_INTERVAL)", spec, n.Sub(t), minInterval)
		}
		t = n
	}
	return s, nil
}

func (s *Scheduler) spec(spec string) (cron.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.specs[spec]; ok {
		return c, nil
	}
	c, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	s.specs[spec] = c
	return c, nil
}

// Run runs passes until ctx ends, each as soon as the schedules it last read have a tick
// due (or one was added or resumed here), at least every Config.Poll; a pass that fails is
// logged and the next one tries again. It returns nil once ctx has ended and the pass in
// flight has returned.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		wait, err := s.pass(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn().Err(err).Msg("schedules: a pass failed; the next one tries again")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.changed:
		case <-s.clock.After(wait):
		}
	}
}

// lookAgain asks Run for a pass now (a schedule was added or resumed here).
func (s *Scheduler) lookAgain() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// maxDue bounds the ticks one schedule may have due at once that are counted one by one (a
// spec of every second after a long outage).
const maxDue = 1_000_000

// Pass takes over the ticks whose replica died, then claims and runs every schedule's due
// ticks. It returns the first error; the ticks it could not run are retried by a later pass.
// Time is the database's (Store.Now), read at the start of the pass and before each claim.
func (s *Scheduler) Pass(ctx context.Context) error {
	_, err := s.pass(ctx)
	return err
}

// minWait is the least wait between two passes: a tick due now is run by this pass, and the
// database's clock and this replica's may differ by a little.
const minWait = 100 * time.Millisecond

// pass is Pass; it also returns how long to wait for the next pass: until the next tick of
// the schedules it read (on the database's clock), at most Config.Poll.
func (s *Scheduler) pass(ctx context.Context) (time.Duration, error) {
	wait := s.cfg.Poll
	now, err := s.store.Now(ctx)
	if err != nil {
		return wait, err
	}
	soonest := func(t time.Time) {
		if !t.IsZero() {
			wait = max(min(wait, t.Sub(now)), minWait)
		}
	}
	var errs []error
	pauses, err := s.store.Pauses(ctx, session.AutomationSchedule)
	if err != nil {
		return wait, err
	}
	paused := func(id int64) (session.Pause, bool) {
		p, ok := pauses[session.AutomationSchedule+"/"+strconv.FormatInt(id, 10)]
		return p, ok && p.Action == session.Paused
	}
	// A tick whose replica died is retried while it is within its grace plus the time its
	// attempts may take, or while it is its schedule's newest.
	since := now.Add(-s.cfg.Grace - session.MaxTickAttempts*s.cfg.ClaimTTL)
	retry, err := s.store.RetryTicks(ctx, s.cfg.Owner, now, since, now.Add(s.cfg.ClaimTTL))
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range retry {
		if _, ok := paused(t.Schedule.ID); ok || !s.stillAdmin(ctx, t.Schedule) {
			continue
		}
		if err := s.run(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	scheds, err := s.store.Schedules(ctx, "", "", false)
	if err != nil {
		return wait, errors.Join(append(errs, err)...)
	}
	for _, sc := range scheds {
		if ctx.Err() != nil {
			break
		}
		spec, err := s.spec(sc.Spec)
		if err != nil {
			continue // refused when added; a spec this build cannot read never ticks
		}
		p, isPaused := paused(sc.ID)
		if isPaused || !s.stillAdmin(ctx, sc) {
			continue
		}
		if p.Action == session.Resumed && p.At.After(sc.LastTick) {
			// Ticks due while it was paused are not run late: it ticks on from its resume.
			sc.LastTick = p.At
		}
		soonest(spec.Next(now))
		due := dueTicks(spec, sc, now, s.cfg.Grace)
		if len(due) > 0 && !s.stillPublic(ctx, sc) {
			continue
		}
		for _, t := range due {
			at, err := s.store.Now(ctx)
			if err != nil {
				errs = append(errs, err)
				break
			}
			claimed, ok, err := s.store.ClaimTick(ctx, t, s.cfg.Owner, at.Add(s.cfg.ClaimTTL))
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !ok {
				continue // another replica has it
			}
			s.missed.Add(float64(claimed.Missed))
			if err := s.run(ctx, claimed); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return wait, errors.Join(errs...)
}

// stillPublic reports whether sc's channel is still one its ticks may start sessions in, asked
// when a tick is due: a channel made private since (logbook keeps no record of private
// conversations) stops the schedule, recorded as stopped by the system with the reason. A
// channel that cannot be read now is taken as it was.
func (s *Scheduler) stillPublic(ctx context.Context, sc session.Schedule) bool {
	if s.cfg.Slack == nil {
		return true
	}
	ch, err := s.cfg.Slack.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: sc.Channel})
	if err != nil || !(ch.IsPrivate || ch.IsIM || ch.IsMpIM) {
		return true
	}
	reason := "stopped: its channel became private, and logbook keeps no record of private conversations"
	if err := s.store.StopSchedule(ctx, sc.Team, sc.ID, reason); err != nil && !errors.Is(err, session.ErrNotFound) {
		s.cfg.Log.Warn().Err(err).Int64("schedule", sc.ID).Msg("schedules: record a schedule stopped")
		return false
	}
	s.cfg.Log.Warn().Int64("schedule", sc.ID).Str("channel", sc.Channel).Msg("schedules: " + reason)
	return false
}

// stillAdmin reports whether the admin who added sc still is one (LOGBOOK_ADMINS); when not,
// the schedule is stopped, recorded as stopped by the system with the reason, and ticks no
// more.
func (s *Scheduler) stillAdmin(ctx context.Context, sc session.Schedule) bool {
	if slices.Contains(s.cfg.Admins, sc.AddedBy) {
		return true
	}
	reason := fmt.Sprintf("stopped: %s, who added it, is no longer in LOGBOOK_ADMINS", sc.AddedBy)
	err := s.store.StopSchedule(ctx, sc.Team, sc.ID, reason)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		s.cfg.Log.Warn().Err(err).Int64("schedule", sc.ID).Msg("schedules: record a schedule stopped")
		return false
	}
	s.cfg.Log.Warn().Int64("schedule", sc.ID).Str("added_by", sc.AddedBy).Msg("schedules: " + reason)
	return false
}

// every is the interval of an @every spec; false for one on the wall clock.
func every(spec cron.Schedule) (time.Duration, bool) {
	switch s := spec.(type) {
	case *cronspec.Spec:
		return s.Every()
	case cron.ConstantDelaySchedule:
		return s.Delay, true
	}
	return 0, false
}

// dueTicks are the ticks of sc due at now, after its newest claimed one (or since it was
// added), oldest first: the newest of those older than grace, late, with how many older ones
// it stands for, then those within their grace (at most ten).
func dueTicks(spec cron.Schedule, sc session.Schedule, now time.Time, grace time.Duration) []session.Tick {
	from := sc.LastTick
	if from.IsZero() {
		from = sc.AddedAt
	}
	var out []session.Tick
	var late *session.Tick
	missed := 0
	if delay, ok := every(spec); ok && delay > 0 {
		// @every after a long outage: skip straight to the last hundred ticks (Next adds the
		// delay to a tick, which is on a whole second), counting the skipped as missed.
		if first := spec.Next(from); now.Sub(first) > 200*delay {
			skip := int(now.Sub(first)/delay) - 100
			from, missed = first.Add(time.Duration(skip-1)*delay), skip
		}
	}
	for t, n := spec.Next(from), 0; !t.IsZero() && !t.After(now) && n < maxDue; t, n = spec.Next(t), n+1 {
		if now.Sub(t) > grace {
			if late != nil {
				missed++
			}
			late = &session.Tick{Schedule: sc, At: t, Late: true}
			continue
		}
		out = append(out, session.Tick{Schedule: sc, At: t})
	}
	if len(out) > 10 {
		out = out[len(out)-10:]
	}
	if late != nil {
		late.Missed = missed
		out = append([]session.Tick{*late}, out...)
	}
	return out
}

// run posts claimed tick t and starts its session, within the attempt's own time; a tick
// under way when ctx ends (SIGTERM) is finished, not left to another replica's retry. The
// first message is the system's (schedule/<id>), with the admin who added it as SetBy. A post
// Slack refuses for good (bot.Permanent) makes the tick final: recorded failed, no retry. A
// tick that ends — ran, refused for good, or out of attempts — is a run of the schedule
// (session.Store.RecordRun); Config.MaxFailures failed in a row pause it (see Pausing).
func (s *Scheduler) run(ctx context.Context, t session.Tick) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ClaimTTL*2/3)
	defer cancel()
	log := s.cfg.Log.With().Int64("schedule", t.Schedule.ID).Str("tick", t.ID()).Int("attempt", t.Attempt).Str("channel", t.Schedule.Channel).Logger()
	now, err := s.store.Now(ctx)
	if err != nil {
		return fmt.Errorf("tick %s: %w", t.ID(), err)
	}
	late := t.Late || now.Sub(t.At) > s.cfg.Grace
	name := s.cfg.Names(ctx, t.Schedule.AddedBy)
	o := bot.Opening{Team: t.Schedule.Team, Channel: t.Schedule.Channel, Kind: MetadataEventType, Key: t.ID(),
		Text: postText(t, name, late, now), Input: inputText(t, name, late, now),
		Actor: session.Actor{Kind: session.ActorSystem, ID: "schedule/" + strconv.FormatInt(t.Schedule.ID, 10)}, UserName: "schedule " + strconv.FormatInt(t.Schedule.ID, 10),
		SetBy: t.Schedule.AddedBy}
	st, err := s.starter.Start(ctx, o)
	run := session.AutomationRun{Kind: session.AutomationSchedule, Name: strconv.FormatInt(t.Schedule.ID, 10), Team: t.Schedule.Team,
		Channel: t.Schedule.Channel, Ref: t.ID(), Late: late}
	if err != nil && st.TS == "" && bot.Permanent(err) {
		if ferr := s.store.TickFailed(ctx, t, err.Error()); ferr != nil {
			return fmt.Errorf("tick %s: %w", t.ID(), ferr)
		}
		log.Error().Err(err).Msg("schedules: Slack refused the tick's post for good (invite logbook to the channel, or remove the schedule); no further attempt")
		s.failed(ctx, t.Schedule, run, err)
		return fmt.Errorf("tick %s: %w", t.ID(), err)
	}
	if err != nil {
		log.Warn().Err(err).Msg("schedules: a tick could not start its session; another attempt follows once this one expires")
		if t.Attempt >= session.MaxTickAttempts {
			s.failed(ctx, t.Schedule, run, err)
		}
		return fmt.Errorf("tick %s: %w", t.ID(), err)
	}
	if err := s.store.TickRan(ctx, t, st.TS, st.Session.ID, st.Found); err != nil {
		return err
	}
	run.OK, run.TS, run.Session = true, st.TS, st.Session.ID
	if _, _, err := s.store.RecordRun(ctx, run); err != nil {
		log.Warn().Err(err).Msg("schedules: record a tick's run")
	}
	if late {
		s.late.Inc()
	}
	log.Info().Str("ts", st.TS).Str("session_id", st.Session.ID.String()).Bool("late", late).Bool("found", st.Found).Msg("schedules: tick ran")
	return nil
}

// failed records run, a tick of sc that ended without running because of cause, and pauses sc
// when Config.MaxFailures ticks have failed in a row: recorded (it survives restarts; one
// replica pauses it) and said in its channel, naming the admins who may resume it.
func (s *Scheduler) failed(ctx context.Context, sc session.Schedule, run session.AutomationRun, cause error) {
	log := s.cfg.Log.With().Int64("schedule", sc.ID).Str("channel", sc.Channel).Logger()
	run.Error = cause.Error()
	_, n, err := s.store.RecordRun(ctx, run)
	if err != nil {
		log.Warn().Err(err).Msg("schedules: record a failed tick")
		return
	}
	if n < s.cfg.MaxFailures {
		return
	}
	reason := fmt.Sprintf("its last %d ticks failed (LOGBOOK_AUTOMATION_MAX_FAILURES); the last: %s", n, clipRunes(cause.Error(), 200))
	_, ok, err := s.store.PauseAutomation(ctx, session.Pause{Kind: session.AutomationSchedule, Name: run.Name, Channel: sc.Channel, Reason: reason})
	if err != nil {
		log.Error().Err(err).Msg("schedules: record a schedule paused")
		return
	}
	if !ok {
		return // paused already (another replica's pass)
	}
	log.Warn().Int("failures", n).Msg("schedules: a schedule paused itself after failures in a row; /logbook schedule resume " + run.Name)
	text := fmt.Sprintf(":double_vertical_bar: *Schedule %d* (`%s`) paused itself: its last %d ticks failed (the last: `%s`). ",
		sc.ID, codeText(sc.Spec), n, codeText(clipRunes(cause.Error(), 200)))
	text += resumeText(s.cfg.Admins, "/logbook schedule resume "+run.Name)
	s.notice(ctx, sc.Channel, text)
}

// resumeText says who may resume a paused schedule or hook, and how.
func resumeText(admins []string, command string) string {
	if who := slashcmd.Mentions(admins); who != "" {
		return "An admin can resume it with `" + command + "`: " + who + "."
	}
	return "An admin (LOGBOOK_ADMINS) can resume it with `" + command + "`."
}

// notice posts text in channel (no metadata, no session), logging a failure.
func (s *Scheduler) notice(ctx context.Context, channel, text string) {
	if s.cfg.Poster == nil {
		return
	}
	if _, _, err := s.cfg.Poster.PostMessageContext(ctx, channel, slack.MsgOptionText(text, false)); err != nil {
		s.cfg.Log.Warn().Err(err).Str("channel", channel).Msg("schedules: post a notice")
	}
}

// postText is a tick's top-level message: which schedule, who set it, and the prompt (escaped:
// it never pings).
func postText(t session.Tick, name string, late bool, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, ":alarm_clock: *Schedule %d* (`%s`), set by %s", t.Schedule.ID, codeText(t.Schedule.Spec), mrkdwn.Inert(mrkdwn.EscapeText(name)))
	if late {
		fmt.Fprintf(&b, " — *late*: this tick was due at %s and runs %s late, because %s", t.At.UTC().Format("2006-01-02 15:04:05 UTC"),
			lateBy(t, now), lateBecause(t))
		if t.Missed > 0 {
			fmt.Fprintf(&b, " (%d earlier %s skipped)", t.Missed, plural(t.Missed, "tick was", "ticks were"))
		}
	}
	b.WriteString(":\n")
	b.WriteString(quote(mrkdwn.Inert(mrkdwn.EscapeText(t.Schedule.Prompt))))
	return b.String()
}

// inputText is the session's first message: the prompt, with what the post says about it.
func inputText(t session.Tick, name string, late bool, now time.Time) string {
	head := fmt.Sprintf("Scheduled run of schedule %d (%s, set by %s)", t.Schedule.ID, t.Schedule.Spec, name)
	if late {
		head += fmt.Sprintf(", late: it was due at %s and runs %s late, because %s", t.At.UTC().Format(time.RFC3339), lateBy(t, now), lateBecause(t))
		if t.Missed > 0 {
			head += fmt.Sprintf(" (%d earlier %s skipped)", t.Missed, plural(t.Missed, "tick was", "ticks were"))
		}
	}
	return head + ":\n\n" + t.Schedule.Prompt
}

// lateBy is how late tick t runs at now, to the second (to the minute past an hour).
func lateBy(t session.Tick, now time.Time) string {
	d := now.Sub(t.At)
	if d >= time.Hour {
		return d.Truncate(time.Minute).String()
	}
	return d.Truncate(time.Second).String()
}

// lateBecause says why tick t missed its grace, as far as the record tells.
func lateBecause(t session.Tick) string {
	if t.Late {
		return "no replica of logbook ran it within its grace (LOGBOOK_SCHEDULE_GRACE): logbook, or its database, was down"
	}
	return "its first attempt did not finish (its replica stopped, or Slack or the database failed) and this is a later one"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// quote is text as a Slack block quote.
func quote(text string) string {
	return "> " + strings.ReplaceAll(text, "\n", "\n> ")
}

// codeText is s made safe inside a code span: no backtick to end it, Slack's &, < and >
// escaped.
func codeText(s string) string {
	if r := []rune(s); len(r) > 80 {
		s = string(r[:80]) + "…"
	}
	return strings.NewReplacer("`", "'", "&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
