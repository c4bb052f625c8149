package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/logbook/logbook/bot"
	"github.com/logbook/logbook/bot/fork"
)

// manifestPath is the Slack app manifest users create the app from (docs/deploy.md).
const manifestPath = "../../docs/slack-app-manifest.yaml"

// slackManifest is the part of Slack's app manifest schema logbook depends on.
type slackManifest struct {
	Features struct {
		BotUser *struct {
			DisplayName string `yaml:"display_name"`
		} `yaml:"bot_user"`
		SlashCommands []struct {
			Command      string `yaml:"command"`
			ShouldEscape *bool  `yaml:"should_escape"`
			URL          string `yaml:"url"`
		} `yaml:"slash_commands"`
		Shortcuts []struct {
			Type       string `yaml:"type"`
			CallbackID string `yaml:"callback_id"`
		} `yaml:"shortcuts"`
		AppHome struct {
			HomeTab     bool  `yaml:"home_tab_enabled"`
			MessagesTab *bool `yaml:"messages_tab_enabled"`
		} `yaml:"app_home"`
		CodeChannels struct {
			Enabled         bool   `yaml:"enabled"`
			SlashCommandURL string `yaml:"slash_command_url"`
		} `yaml:"code_channels"`
	} `yaml:"features"`
	OAuthConfig struct {
		Scopes map[string][]string `yaml:"scopes"`
	} `yaml:"oauth_config"`
	Settings struct {
		EventSubscriptions struct {
			RequestURL string   `yaml:"request_url"`
			BotEvents  []string `yaml:"bot_events"`
			UserEvents []string `yaml:"user_events"`
		} `yaml:"event_subscriptions"`
		SocketModeEnabled *bool `yaml:"socket_mode_enabled"`
		Interactivity     struct {
			IsEnabled bool `yaml:"is_enabled"`
		} `yaml:"interactivity"`
	} `yaml:"settings"`
}

// The manifest grants exactly what logbook uses, and nothing that would deliver DMs,
// private channels or a human's own messages.
func TestSlackAppManifest(t *testing.T) {
	raw, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	var m slackManifest
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("parse %s: %v", manifestPath, err)
	}

	if m.Settings.SocketModeEnabled == nil || !*m.Settings.SocketModeEnabled {
		t.Errorf("settings.socket_mode_enabled must be true")
	}
	if m.Settings.EventSubscriptions.RequestURL != "" {
		t.Errorf("event_subscriptions.request_url %q: Socket Mode takes no request URL", m.Settings.EventSubscriptions.RequestURL)
	}
	if len(m.Settings.EventSubscriptions.UserEvents) > 0 {
		t.Errorf("user_events %v: logbook subscribes to no user events", m.Settings.EventSubscriptions.UserEvents)
	}
	if got, want := sorted(m.Settings.EventSubscriptions.BotEvents), []string{"agent_session_stopped", "app_home_opened", "app_mention", "channel_archive", "channel_deleted", "channel_shared",
		"channel_unshared", "member_left_channel", "message.channels", "reaction_added"}; !slices.Equal(got, want) {
		t.Errorf("bot_events %v, want exactly %v", got, want)
	}

	// App Home (bot/apphome): the Home tab on, the Messages tab off (no DMs are ever read).
	if !m.Features.AppHome.HomeTab || m.Features.AppHome.MessagesTab == nil || *m.Features.AppHome.MessagesTab {
		t.Errorf("app_home %+v, want the Home tab on and the Messages tab off", m.Features.AppHome)
	}
	// Code channels (bot/codechannel): the feature on (Socket Mode routes their commands: no
	// URL), code_channels:manage for agents.conversations.*.
	if !m.Features.CodeChannels.Enabled || m.Features.CodeChannels.SlashCommandURL != "" {
		t.Errorf("code_channels %+v, want enabled, without a slash_command_url (Socket Mode)", m.Features.CodeChannels)
	}
	wantBot := []string{"app_mentions:read", "canvases:read", "canvases:write", "channels:history", "channels:read", "chat:write", "code_channels:manage", "commands", "files:read", "files:write", "reactions:read", "reactions:write", "usergroups:read", "users:read"}
	if got := sorted(m.OAuthConfig.Scopes["bot"]); !slices.Equal(got, wantBot) {
		t.Errorf("bot scopes %v, want exactly %v", got, wantBot)
	}
	for kind, scopes := range m.OAuthConfig.Scopes {
		if kind != "bot" {
			t.Errorf("oauth_config.scopes.%s %v: logbook asks for bot scopes only", kind, scopes)
		}
	}

	if m.Features.BotUser == nil {
		t.Errorf("features.bot_user is missing: without it there is no xoxb- token")
	}
	if len(m.Features.SlashCommands) != 1 {
		t.Fatalf("slash_commands %+v, want exactly /logbook", m.Features.SlashCommands)
	}
	cmd := m.Features.SlashCommands[0]
	if cmd.Command != "/logbook" || cmd.ShouldEscape == nil || *cmd.ShouldEscape || cmd.URL != "" {
		escape := "unset"
		if cmd.ShouldEscape != nil {
			escape = fmt.Sprint(*cmd.ShouldEscape)
		}
		t.Errorf("slash command %s (should_escape %s, url %q), want /logbook with should_escape false and no url",
			cmd.Command, escape, cmd.URL)
	}

	// The transcript and branch message shortcuts, delivered as interactive envelopes over
	// Socket Mode.
	if len(m.Features.Shortcuts) != 2 || m.Features.Shortcuts[0].Type != "message" || m.Features.Shortcuts[0].CallbackID != bot.TranscriptShortcut ||
		m.Features.Shortcuts[1].Type != "message" || m.Features.Shortcuts[1].CallbackID != fork.Shortcut {
		t.Errorf("shortcuts %+v, want exactly the message shortcuts %q and %q", m.Features.Shortcuts, bot.TranscriptShortcut, fork.Shortcut)
	}
	if !m.Settings.Interactivity.IsEnabled {
		t.Errorf("interactivity must be on for the transcript shortcut")
	}

	// Nowhere in the manifest, under any key: the subscriptions that deliver DMs, private
	// channels and group DMs, or the scopes that come with them.
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"message.im", "message.groups", "message.mpim", "im:history", "groups:history", "mpim:history"}
	walkStrings(doc, func(s string) {
		if slices.Contains(forbidden, s) {
			t.Errorf("manifest contains %q", s)
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// walkStrings calls f for every key and scalar string in a decoded YAML document.
func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(strings.TrimSpace(v))
	case []any:
		for _, e := range v {
			walkStrings(e, f)
		}
	case map[string]any:
		for k, e := range v {
			f(k)
			walkStrings(e, f)
		}
	case map[any]any:
		for k, e := range v {
			walkStrings(k, f)
			walkStrings(e, f)
		}
	}
}
