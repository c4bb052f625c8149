// Package repo says which repository a channel works on: LOGBOOK_REPOS, else what an admin set
// with /logbook repo (kept in the log's store, each change a row). Sandboxes check it out
// (bot/hands) and pull requests go to it (bot/forge).
package repo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/logbook/logbook/bot/forge"
	"github.com/logbook/logbook/bot/slashcmd"
	"github.com/logbook/logbook/sandbox/egress"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/slacktext"
)

// Store keeps what admins set with /logbook repo (*session.Store).
type Store interface {
	SetChannelRepo(ctx context.Context, r session.ChannelRepo) (session.ChannelRepo, error)
	ChannelRepo(ctx context.Context, channel string) (session.ChannelRepo, error)
}

// Channels says which repository a channel's sandboxes check out and its pull requests go
// to: what an admin last set with `/logbook repo` (Store), else LOGBOOK_REPOS (Static), whose
// owner/name is cloned from URLTemplate (LOGBOOK_REPO_URL, {repo} for owner/name; default
// https://github.com/{repo}.git). A nil *Channels knows no repository.
type Channels struct {
	Static      Static
	URLTemplate string
	// ForgeHost is the host whose repository URLs are the forge's (github.com, or the GitHub
	// Enterprise host): an admin's URL on it gets pull requests, others only a checkout.
	ForgeHost string
	Store     Store
	// PullRequests says whether logbook can open pull requests at all (GITHUB_TOKEN).
	PullRequests bool
}

// Repo is a channel's repository: where it is cloned from and its base branch; Forge
// is set (OnForge) when pull requests can be opened on it. SetBy names the admin who set it
// ("" when it comes from the configuration).
type Repo struct {
	URL, Branch string
	Forge       forge.Repo
	OnForge     bool
	SetBy       string
}

// For returns the channel's repository; ok false when it has none. team is the session's (or
// the asker's) team and does not narrow the look-up: a channel's repository is the channel's,
// whichever organisation of a Slack Connect channel set it or asks.
func (c *Channels) For(ctx context.Context, team, channel string) (Repo, bool, error) {
	_ = team
	if c == nil {
		return Repo{}, false, nil
	}
	if c.Store != nil {
		set, err := c.Store.ChannelRepo(ctx, channel)
		switch {
		case err == nil && set.URL == "":
			return Repo{}, false, nil // switched off by an admin
		case err == nil:
			r := Repo{URL: set.URL, Branch: set.Branch, SetBy: set.SetBy}
			r.Forge, r.OnForge = c.onForge(set.URL, set.Branch)
			return r, true, nil
		case !errors.Is(err, session.ErrNotFound):
			return Repo{}, false, err
		}
	}
	repo, ok := c.Static.For(channel)
	if !ok {
		return Repo{}, false, nil
	}
	tmpl := cmp.Or(c.URLTemplate, "https://github.com/{repo}.git")
	return Repo{URL: strings.ReplaceAll(tmpl, "{repo}", repo.String()), Branch: repo.Base, Forge: repo, OnForge: true}, true, nil
}

// OnForge is the channel's repository on GitHub (forge.Pulls.Repo); ok false when it has none
// there.
func (c *Channels) OnForge(ctx context.Context, team, channel string) (forge.Repo, bool, error) {
	r, ok, err := c.For(ctx, team, channel)
	return r.Forge, ok && r.OnForge, err
}

// onForge reads owner/name off a URL of the forge's host.
func (c *Channels) onForge(raw, branch string) (forge.Repo, bool) {
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Hostname(), cmp.Or(c.ForgeHost, "github.com")) {
		return forge.Repo{}, false
	}
	path := strings.TrimSuffix(strings.Trim(u.Path, "/"), ".git")
	spec := path
	if branch != "" {
		spec += "@" + branch
	}
	repo, err := forge.ParseRepo(spec)
	if err != nil || strings.Count(path, "/") != 1 {
		return forge.Repo{}, false
	}
	return repo, true
}

// SlashCommand is /logbook repo, in the channel it is typed in (admins set it).
func SlashCommand(repos *Channels, admins []string) slashcmd.Command {
	return slashcmd.Command{Name: "repo", Who: slashcmd.Home,
		Usage:   "`/logbook repo` says which repository this channel's sandboxes check out; an admin sets it with `/logbook repo <https-url> [branch]` or `off`.",
		Refusal: "Only people of this workspace's organisation may see or set a channel's repository.",
		Run: func(ctx context.Context, c slashcmd.Call) string {
			return Command(ctx, repos, admins, c.Team, c.ChannelID, c.UserID, c.Args)
		}}
}

// Command is /logbook repo: with no argument it says what the channel has; an admin
// (LOGBOOK_ADMINS) sets it with `<url> [branch]` (branch default main), or `off`. The URL must be https (http only
// to a loopback host) and carry no credentials: logbook adds those itself, and only for the
// forge's host.
func Command(ctx context.Context, repos *Channels, admins []string, team, channel, user, args string) string {
	f := strings.Fields(args)
	if len(f) == 0 {
		r, ok, err := repos.For(ctx, team, channel)
		switch {
		case err != nil:
			return "The channel's repository cannot be read right now."
		case !ok:
			if repos != nil && repos.Store != nil {
				if off, err := repos.Store.ChannelRepo(ctx, channel); err == nil && off.URL == "" {
					return "This channel has no repository: <@" + off.SetBy + "> switched it off (`/logbook repo off`), whatever LOGBOOK_REPOS says. An admin sets one with `/logbook repo <https-url> [branch]`."
				}
			}
			return "This channel has no repository. An admin sets one with `/logbook repo <https-url> [branch]`."
		}
		by := "the configuration (LOGBOOK_REPOS)"
		if r.SetBy != "" {
			by = "<@" + r.SetBy + ">"
		}
		return fmt.Sprintf("This channel's sandboxes check out `%s` at %s (set by %s); %s.", r.URL, branchText(r.Branch), by, repos.pullsText(r))
	}
	if repos == nil || repos.Store == nil {
		return "Repositories are set in logbook's configuration here (LOGBOOK_REPOS)."
	}
	allowed := false
	for _, a := range admins {
		allowed = allowed || a == user
	}
	if !allowed {
		return "Only logbook's admins (LOGBOOK_ADMINS) may set a channel's repository."
	}
	if !strings.HasPrefix(channel, "C") && !strings.HasPrefix(channel, "G") {
		return "A repository belongs to a channel: set it in the channel whose threads should use it."
	}
	// The base branch defaults to main, as in LOGBOOK_REPOS: the branch the sandbox checks
	// out is the one pull requests go to.
	set := session.ChannelRepo{Team: team, Channel: channel, SetBy: user, Branch: "main"}
	if !(len(f) == 1 && f[0] == "off") {
		if len(f) > 2 {
			return "Usage: `/logbook repo <https-url> [branch]`, or `/logbook repo off`."
		}
		raw := strings.Trim(f[0], "<>") // Slack wraps links in <…>
		if before, _, ok := strings.Cut(raw, "|"); ok {
			raw = before
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
			(u.Scheme != "https" && !(u.Scheme == "http" && egress.IsLoopbackHost(u.Hostname()))) ||
			strings.ContainsAny(raw, " \x00\n\r") || strings.HasPrefix(raw, "-") {
			return "That is not a repository URL logbook takes: `https://host/owner/name.git`, without credentials."
		}
		set.URL = u.String()
		if len(f) == 2 {
			if !forge.ValidBranch(f[1]) {
				return fmt.Sprintf("`%s` is not a branch name.", f[1])
			}
			set.Branch = f[1]
		}
	}
	if _, err := repos.Store.SetChannelRepo(ctx, set); err != nil {
		return "The repository could not be saved; try again."
	}
	if set.URL == "" {
		return "This channel has no repository now (set by <@" + user + ">)."
	}
	r, _, _ := repos.For(ctx, team, channel)
	return fmt.Sprintf("New sandboxes of this channel check out `%s` at %s; %s. (Set by <@%s>.)", set.URL, branchText(set.Branch), repos.pullsText(r), user)
}

func branchText(b string) string {
	if b == "" {
		return "its default branch"
	}
	return "`" + b + "`"
}

// pullsText says whether create_pull_request works on r.
func (c *Channels) pullsText(r Repo) string {
	switch {
	case !c.PullRequests:
		return "no pull requests (logbook has no GITHUB_TOKEN)"
	case !r.OnForge:
		return "no pull requests (not a repository of the configured GitHub)"
	default:
		return "create_pull_request opens pull requests on it"
	}
}

// Static maps channels to their repository (LOGBOOK_REPOS): CHANNEL=owner/name[@base] entries,
// and *=… for every other channel.
type Static map[string]forge.Repo

// ParseStatic reads a LOGBOOK_REPOS value.
func ParseStatic(s string) (Static, error) {
	r := Static{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		channel, spec, ok := strings.Cut(entry, "=")
		channel = strings.TrimSpace(channel)
		if !ok || (channel != "*" && !slacktext.IsChannelID(channel)) {
			return nil, fmt.Errorf("%q: want CHANNEL=owner/name[@branch] or *=owner/name[@branch]", entry)
		}
		repo, err := forge.ParseRepo(spec)
		if err != nil {
			return nil, err
		}
		r[channel] = repo
	}
	return r, nil
}

// For returns channel's repository.
func (r Static) For(channel string) (forge.Repo, bool) {
	if repo, ok := r[channel]; ok {
		return repo, true
	}
	repo, ok := r["*"]
	return repo, ok
}
