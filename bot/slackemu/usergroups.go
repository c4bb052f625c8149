package slackemu

import (
	"net/http"
	"net/url"
	"slices"
)

// UserGroup is a user group of the emulated workspace (Slack's "subteam", mentioned as
// <!subteam^ID>): its id (S…), handle and members. Groups are kept in memory only (not in
// Options.StateFile).
type UserGroup struct {
	ID     string   `json:"id"`
	Handle string   `json:"handle"`
	Name   string   `json:"name"`
	Users  []string `json:"users"`
	// Disabled groups answer usergroups.users.list only with include_disabled=true.
	Disabled bool `json:"disabled,omitempty"`
}

// AddUserGroup adds or replaces a user group.
func (s *Server) AddUserGroup(g UserGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.Users = slices.Clone(g.Users)
	if s.usergroups == nil {
		s.usergroups = map[string]*UserGroup{}
	}
	s.usergroups[g.ID] = &g
	s.notifyLocked()
}

// usergroupsUsersList is usergroups.users.list: {"ok":true,"users":[…]} for the group named by
// usergroup; no_such_subteam for a group that does not exist (or is disabled, without
// include_disabled=true), missing_argument without usergroup. Slack documents the method
// under the usergroups:read scope; the emulator does not check scopes. Its failures as Slack
// answers them otherwise (plan_upgrade_required, ratelimited, a dropped connection) come from
// InjectMethodFault.
func (s *Server) usergroupsUsersList(_ *http.Request, p url.Values) map[string]any {
	id := p.Get("usergroup")
	if id == "" {
		return fail("missing_argument")
	}
	g := s.usergroups[id]
	if g == nil || g.Disabled && p.Get("include_disabled") != "true" {
		return fail("no_such_subteam")
	}
	users := slices.Clone(g.Users)
	if users == nil {
		users = []string{}
	}
	return map[string]any{"ok": true, "users": users}
}
