package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/audit/cronspec"
	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/budget"
	"github.com/logbook/logbook/bot/mrkdwn"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/session"
)

// Usage is the line of `/logbook help` that tells of schedules.
const Usage = "`/logbook schedule add \"<cron spec>\" <prompt>` (admins) posts here on a schedule and runs a session on the prompt at each tick " +
	"(e.g. `\"0 9 * * MON-FRI\"`, `\"@every 1h\"`, `\"CRON_TZ=Europe/Paris 0 8 * * *\"`); `/logbook schedule list`, `/logbook schedule remove <id>`, " +
	"`/logbook schedule resume <id>` or `resume hook <name>` (admins)."

// usage answers `/logbook schedule` without a known subcommand.
const usage = "`/logbook schedule add \"<cron spec>\" <prompt>` — an admin adds a schedule to this channel: each tick posts here and runs a session on the prompt. " +
	"The spec is robfig/cron's: five fields (minute hour day month weekday), or six with seconds first, a descriptor (`@hourly`, `@daily`, `@every 30m`), " +
	"optionally after `CRON_TZ=<zone>`.\n`/logbook schedule list` lists this channel's schedules and hooks with their recent runs; `/logbook schedule remove <id>` (admins) removes one; " +
	"`/logbook schedule resume <id>` and `/logbook schedule resume hook <name>` (admins) resume one that paused itself after failing in a row."

// MaxPerChannel is how many schedules one channel may have at once.
const MaxPerChannel = 20

// maxPrompt is the longest prompt a schedule keeps (the schedules table's check).
const maxPrompt = 4000

// Command is `/logbook schedule add|list|remove`, answered from s's store and settings.
// People of another organisation (Slack Connect) may neither see nor change the schedules.
func Command(s *Scheduler) slashcmd.Command {
	return slashcmd.Command{Name: "schedule", Who: slashcmd.Home, Usage: Usage,
		Refusal: "Only people of this workspace's organisation may see or change schedules.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return s.command(ctx, c.Team, c.ChannelID, c.UserID, c.Args)
		}}
}

func (s *Scheduler) command(ctx context.Context, team, channel, user, args string) string {
	verb, rest, _ := strings.Cut(args, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "list":
		return s.list(ctx, team, channel)
	case "add", "remove", "resume":
		if !slices.Contains(s.cfg.Admins, user) {
			return "Only logbook's admins (LOGBOOK_ADMINS) may add, remove or resume schedules and hooks."
		}
		switch verb {
		case "add":
			return s.add(ctx, team, channel, user, rest)
		case "resume":
			return s.resume(ctx, team, user, rest)
		}
		return s.remove(ctx, team, user, rest)
	default:
		return usage
	}
}

func (s *Scheduler) add(ctx context.Context, team, channel, user, args string) string {
	if !strings.HasPrefix(channel, "C") && !strings.HasPrefix(channel, "G") {
		return "A schedule belongs to a channel: use `/logbook schedule add` in the channel it should post in."
	}
	spec, prompt, ok := cutQuoted(args)
	if !ok {
		return "Put the cron spec in quotes, then the prompt: `/logbook schedule add \"0 9 * * MON-FRI\" summarise yesterday's deploys`."
	}
	prompt = strings.TrimSpace(prompt)
	switch {
	case prompt == "":
		return "Say what each tick should ask, after the spec: `/logbook schedule add \"" + codeText(spec) + "\" <prompt>`."
	case utf8.RuneCountInString(prompt) > maxPrompt:
		return fmt.Sprintf("That prompt is %d characters; a schedule keeps at most %d.", utf8.RuneCountInString(prompt), maxPrompt)
	}
	now := s.now(ctx)
	c, err := Check(spec, now, s.cfg.MinInterval)
	if err != nil {
		return "That schedule was not added: " + mrkdwn.EscapeText(err.Error()) + ".\n" + usage
	}
	if refusal := s.checkChannel(ctx, channel); refusal != "" {
		return refusal
	}
	if have, err := s.store.Schedules(ctx, team, channel, false); err != nil {
		s.cfg.Log.Error().Err(err).Msg("schedules: count a channel's schedules")
		return "The schedule could not be saved; try again."
	} else if len(have) >= MaxPerChannel {
		return fmt.Sprintf("This channel has %d schedules, the most it may have; remove one first (`/logbook schedule list`).", len(have))
	}
	sc, err := s.store.AddSchedule(ctx, session.Schedule{Team: team, Channel: channel, Spec: spec, Prompt: prompt, AddedBy: user})
	if err != nil {
		s.cfg.Log.Error().Err(err).Msg("schedules: add")
		return "The schedule could not be saved; try again."
	}
	s.lookAgain() // its ticks may come before the next pass would
	return fmt.Sprintf("Schedule %d added by <@%s>: `%s` in this channel, next tick %s. Each tick posts here and runs a session on:\n%s\n(`/logbook schedule remove %d` removes it.)",
		sc.ID, user, codeText(spec), tickText(c, nextTick(c, sc, now)), quote(mrkdwn.Inert(mrkdwn.EscapeText(clipRunes(prompt, 500)))), sc.ID)
}

func (s *Scheduler) remove(ctx context.Context, team, user, args string) string {
	id, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(args), "#"), 10, 64)
	if err != nil || id <= 0 {
		return "Say which schedule: `/logbook schedule remove <id>` (`/logbook schedule list` shows the ids)."
	}
	if _, err := s.store.RemoveSchedule(ctx, team, id, user); errors.Is(err, session.ErrNotFound) {
		return fmt.Sprintf("There is no schedule %d (or it was removed already).", id)
	} else if err != nil {
		s.cfg.Log.Error().Err(err).Msg("schedules: remove")
		return "The schedule could not be removed; try again."
	}
	return fmt.Sprintf("Schedule %d removed by <@%s>: it ticks no more.", id, user)
}

// resume is `/logbook schedule resume <id>` and `/logbook schedule resume hook <name>`: an
// admin resumes a schedule or hook that paused itself (recorded with who).
func (s *Scheduler) resume(ctx context.Context, team, user, args string) string {
	args = strings.TrimSpace(args)
	if name, ok := strings.CutPrefix(args, "hook "); ok {
		name = strings.TrimSpace(name)
		channel, known := s.cfg.Hooks[name]
		if !known {
			return "There is no hook by that name in LOGBOOK_HOOKS."
		}
		p := session.Pause{Kind: session.AutomationHook, Name: name, Channel: channel, Actor: user, At: s.now(ctx)}
		if _, err := s.store.ResumeAutomation(ctx, p); errors.Is(err, session.ErrNotFound) {
			return fmt.Sprintf("The hook `%s` is not paused.", codeText(name))
		} else if err != nil {
			s.cfg.Log.Error().Err(err).Msg("hooks: resume")
			return "The hook could not be resumed; try again."
		}
		return fmt.Sprintf("Hook `%s` resumed by <@%s>: it takes deliveries again.", codeText(name), user)
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(args, "#"), 10, 64)
	if err != nil || id <= 0 {
		return "Say which: `/logbook schedule resume <id>`, or `/logbook schedule resume hook <name>` (`/logbook schedule list` shows them)."
	}
	scheds, err := s.store.Schedules(ctx, team, "", false)
	if err != nil {
		return "The schedules cannot be read right now."
	}
	i := slices.IndexFunc(scheds, func(sc session.Schedule) bool { return sc.ID == id })
	if i < 0 {
		return fmt.Sprintf("There is no schedule %d (or it was removed).", id)
	}
	p := session.Pause{Kind: session.AutomationSchedule, Name: strconv.FormatInt(id, 10), Channel: scheds[i].Channel, Actor: user, At: s.now(ctx)}
	if _, err := s.store.ResumeAutomation(ctx, p); errors.Is(err, session.ErrNotFound) {
		return fmt.Sprintf("Schedule %d is not paused.", id)
	} else if err != nil {
		s.cfg.Log.Error().Err(err).Msg("schedules: resume")
		return "The schedule could not be resumed; try again."
	}
	s.lookAgain()
	return fmt.Sprintf("Schedule %d resumed by <@%s>: it ticks again from now (the ticks due while it was paused are not run).", id, user)
}

// recentRuns is how many runs of each schedule and hook /logbook schedule list shows.
const recentRuns = 3

func (s *Scheduler) list(ctx context.Context, team, channel string) string {
	scheds, err := s.store.Schedules(ctx, team, channel, false)
	if err != nil {
		return "The schedules cannot be read right now."
	}
	var hooks []string
	for name, ch := range s.cfg.Hooks {
		if ch == channel {
			hooks = append(hooks, name)
		}
	}
	slices.Sort(hooks)
	if len(scheds) == 0 && len(hooks) == 0 {
		return "This channel has no schedules. " + Usage
	}
	pauses, err := s.store.Pauses(ctx, "")
	if err != nil {
		return "The schedules cannot be read right now."
	}
	runs, err := s.store.AutomationRuns(ctx, session.RunFilter{Channel: channel, PerName: recentRuns})
	if err != nil {
		return "The schedules cannot be read right now."
	}
	now := s.now(ctx)
	var b strings.Builder
	if len(scheds) > 0 {
		b.WriteString("*This channel's schedules:*\n")
	}
	for _, sc := range scheds {
		next := "never"
		if c, err := Parse(sc.Spec); err == nil {
			next = tickText(c, nextTick(c, sc, now))
		}
		name := strconv.FormatInt(sc.ID, 10)
		if p, ok := pauses[session.AutomationSchedule+"/"+name]; ok && p.Action == session.Paused {
			next = "none: *paused* since " + p.At.UTC().Format("2006-01-02 15:04 UTC") + " (`/logbook schedule resume " + name + "`)"
		}
		fmt.Fprintf(&b, "• %d — `%s`, set by %s on %s, next tick %s: %s\n", sc.ID, codeText(sc.Spec),
			mrkdwn.Inert(mrkdwn.EscapeText(s.cfg.Names(ctx, sc.AddedBy))), sc.AddedAt.UTC().Format("2006-01-02"), next,
			mrkdwn.Inert(mrkdwn.EscapeText(clipRunes(strings.ReplaceAll(sc.Prompt, "\n", " "), 120))))
		s.writeRuns(&b, runs, session.AutomationSchedule, name)
	}
	if len(hooks) > 0 {
		b.WriteString("*Hooks posting here:*\n")
	}
	for _, h := range hooks {
		state := ""
		if p, ok := pauses[session.AutomationHook+"/"+h]; ok && p.Action == session.Paused {
			state = " — *paused* since " + p.At.UTC().Format("2006-01-02 15:04 UTC") + " (`/logbook schedule resume hook " + codeText(h) + "`)"
		}
		fmt.Fprintf(&b, "• hook `%s` (POST /hooks/%s)%s\n", codeText(h), codeText(h), state)
		s.writeRuns(&b, runs, session.AutomationHook, h)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// writeRuns writes the recent runs of (kind, name) among runs, newest first: when, outcome,
// its session (the transcript's link when the pages have an address) and its cost.
func (s *Scheduler) writeRuns(b *strings.Builder, runs []session.AutomationRun, kind, name string) {
	for _, r := range runs {
		if r.Kind != kind || r.Name != name {
			continue
		}
		outcome := "ran"
		if r.Late {
			outcome = "ran late"
		}
		if !r.OK {
			outcome = "failed: `" + codeText(clipRunes(r.Error, 120)) + "`"
		}
		fmt.Fprintf(b, "    ◦ %s %s", r.At.UTC().Format("2006-01-02 15:04:05 UTC"), outcome)
		if r.Session != (session.ID{}) {
			if s.cfg.PublicURL != "" {
				fmt.Fprintf(b, ", <%s|session>", bot.TranscriptURL(s.cfg.PublicURL, r.Session))
			} else {
				fmt.Fprintf(b, ", session `%s`", r.Session)
			}
			fmt.Fprintf(b, ", %s", costText(r.CostMicros))
		}
		b.WriteString("\n")
	}
}

// costText is a run's model spend, in the prices' currency.
func costText(micros int64) string {
	return "cost " + budget.Money(micros).String()
}

// nextTick is sc's first tick after now, counted as its ticks are: an @every schedule's from
// its newest tick (or from when it was added), not from now.
func nextTick(c cron.Schedule, sc session.Schedule, now time.Time) time.Time {
	from := sc.LastTick
	if from.IsZero() {
		from = sc.AddedAt
	}
	delay, ok := every(c)
	if !ok || delay <= 0 || from.IsZero() {
		return c.Next(now)
	}
	first := c.Next(from)
	if first.After(now) {
		return first
	}
	return first.Add((now.Sub(first)/delay + 1) * delay)
}

// tickText is tick t in UTC, and on the wall clock of the spec's zone when that is not UTC.
func tickText(c cron.Schedule, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	text := t.UTC().Format("2006-01-02 15:04:05 UTC")
	if cs, ok := c.(*cronspec.Spec); ok && cs.Location != nil && cs.Location != time.UTC {
		if _, isEvery := cs.Every(); !isEvery {
			text += " (" + t.In(cs.Location).Format("15:04 MST") + ", " + cs.Location.String() + ")"
		}
	}
	return text
}

// checkChannel is why a schedule cannot post in channel ("" when it can, or when there is no
// Config.Slack to ask).
func (s *Scheduler) checkChannel(ctx context.Context, channel string) string {
	if s.cfg.Slack == nil {
		return ""
	}
	ch, err := s.cfg.Slack.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: channel})
	switch {
	case err != nil:
		s.cfg.Log.Warn().Err(err).Str("channel", channel).Msg("schedules: read the channel before adding a schedule")
		return "This channel cannot be read right now, so the schedule was not added; try again."
	case ch.IsPrivate || ch.IsIM || ch.IsMpIM:
		return "This channel is private: logbook keeps no record of private conversations, so schedules start sessions in public channels only."
	case ch.IsArchived:
		return "This channel is archived: a schedule here could never post."
	case !ch.IsMember:
		return "logbook is not a member of this channel, so its ticks could not post: invite it (`/invite @logbook`) first."
	case ch.IsExtShared:
		return "This channel is shared with another organisation (Slack Connect): schedules post only in this workspace's own channels."
	}
	return ""
}

// now is the database's clock, or this replica's when the database cannot be read.
func (s *Scheduler) now(ctx context.Context) time.Time {
	if now, err := s.store.Now(ctx); err == nil {
		return now
	}
	return s.clock.Now()
}

// cutQuoted cuts a spec in straight or curly double quotes off the front of s.
func cutQuoted(s string) (spec, rest string, ok bool) {
	s = strings.TrimSpace(s)
	for _, q := range [][2]string{{`"`, `"`}, {"“", "”"}, {"“", "“"}, {"”", "”"}} {
		if strings.HasPrefix(s, q[0]) {
			body := s[len(q[0]):]
			i := strings.Index(body, q[1])
			if i < 0 {
				continue
			}
			spec = strings.TrimSpace(body[:i])
			return spec, body[i+len(q[1]):], spec != ""
		}
	}
	return "", "", false
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
