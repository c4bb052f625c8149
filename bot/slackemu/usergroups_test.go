package slackemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// usergroups.users.list through the unmodified slack-go client: the members of a group, a
// disabled group only with include_disabled, an unknown group's no_such_subteam, and a fault
// (plan_upgrade_required) as Slack answers it.
func TestUsergroupsUsersList(t *testing.T) {
	t.Parallel()
	emu := startEmu(t, Options{})
	emu.AddUserGroup(UserGroup{ID: "S0000001", Handle: "oncall", Name: "On call", Users: []string{"U0000002"}})
	emu.AddUserGroup(UserGroup{ID: "S0000002", Handle: "old", Name: "Old", Users: []string{"U0000001"}, Disabled: true})
	api := newAPI(emu, emu.BotToken(), emu.AppToken())
	ctx := waitCtx(t)
	users, err := api.GetUserGroupMembersContext(ctx, "S0000001")
	if err != nil || !slices.Equal(users, []string{"U0000002"}) {
		t.Fatalf("members of S0000001: %v %v", users, err)
	}
	if _, err := api.GetUserGroupMembersContext(ctx, "S0000002"); err == nil || !strings.Contains(err.Error(), "no_such_subteam") {
		t.Fatalf("a disabled group without include_disabled: %v", err)
	}
	if users, err := api.GetUserGroupMembersContext(ctx, "S0000002", slack.GetUserGroupMembersOptionIncludeDisabled(true)); err != nil || !slices.Equal(users, []string{"U0000001"}) {
		t.Fatalf("a disabled group with include_disabled: %v %v", users, err)
	}
	if _, err := api.GetUserGroupMembersContext(ctx, "S0000404"); err == nil || !strings.Contains(err.Error(), "no_such_subteam") {
		t.Fatalf("an unknown group: %v", err)
	}
	emu.InjectMethodFault(MethodFault{Method: "usergroups.users.list", Error: "plan_upgrade_required", Times: 1})
	if _, err := api.GetUserGroupMembersContext(ctx, "S0000001"); err == nil || !strings.Contains(err.Error(), "plan_upgrade_required") {
		t.Fatalf("an injected fault: %v", err)
	}
	if users, err := api.GetUserGroupMembersContext(ctx, "S0000001"); err != nil || len(users) != 1 {
		t.Fatalf("after the fault: %v %v", users, err)
	}
}
