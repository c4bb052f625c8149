package settings

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/logbook/logbook/session"
)

// A settings file (`logbook config apply -f channels.yaml`) is channels' settings kept as
// code:
//
//	channels:
//	  C0123ABCD:
//	    model: anthropic:claude-sonnet-4-5
//	    instructions: Answer in English.
//	    daily_budget: 20/day
//	    approvals: shell=ask
//
// A setting the file names is pinned to its value in the channel (a record of its own, even
// when the value is also the environment's default); "default" resets it to the
// environment's default, as /logbook config <name> default does; a setting the file does not
// name is left as it is.

// FileChannel is one channel of a settings file, its settings in the file's order.
type FileChannel struct {
	Channel  string
	Line     int
	Settings []FileSetting
}

// FileSetting is one setting of a channel in a settings file. Set false: "default".
type FileSetting struct {
	Name, Value string
	Set         bool
	Line        int
}

// channelID is a Slack conversation id.
var channelID = regexp.MustCompile(`^[CGD][A-Z0-9]{2,}$`)

// ValidChannelID says whether id looks like a Slack conversation id (C0123ABCD).
func ValidChannelID(id string) bool { return channelID.MatchString(id) }

// ReadFile reads a settings file and checks each setting's name and value with the checks
// /logbook config applies. It returns the channels in the file's order and, when anything is
// wrong, one line per problem naming where (line N: channel: what); the channels are
// returned only when there is none.
func (s *Settings) ReadFile(data []byte) ([]FileChannel, []string) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, []string{"not a YAML settings file: " + err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, []string{"the file is empty: want channels: {<channel id>: {<setting>: <value>}}"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, []string{fmt.Sprintf("line %d: want a mapping with channels: {<channel id>: {<setting>: <value>}}", root.Line)}
	}
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
	}
	var chans *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Value != "channels" {
			bad(k.Line, "unknown key %q (the file has one key: channels)", k.Value)
			continue
		}
		chans = root.Content[i+1]
	}
	if chans == nil {
		if len(problems) == 0 {
			bad(root.Line, "no channels: key")
		}
		return nil, problems
	}
	if chans.Kind != yaml.MappingNode {
		bad(chans.Line, "channels: want a mapping of channel ids to their settings")
		return nil, problems
	}
	var out []FileChannel
	channelAt := map[string]int{} // a YAML mapping may repeat a key; a settings file may not
	for i := 0; i+1 < len(chans.Content); i += 2 {
		k, v := chans.Content[i], chans.Content[i+1]
		c := FileChannel{Channel: k.Value, Line: k.Line}
		if !ValidChannelID(c.Channel) {
			bad(k.Line, "%q is not a channel id (e.g. C0123ABCD)", c.Channel)
			continue
		}
		if at, ok := channelAt[c.Channel]; ok {
			bad(k.Line, "%s is in the file twice (also line %d)", c.Channel, at)
			continue
		}
		channelAt[c.Channel] = k.Line
		if v.Kind != yaml.MappingNode {
			bad(v.Line, "%s: want a mapping of settings to values", c.Channel)
			continue
		}
		settingAt := map[string]int{}
		for j := 0; j+1 < len(v.Content); j += 2 {
			n, val := v.Content[j], v.Content[j+1]
			at, twice := settingAt[n.Value]
			settingAt[n.Value] = n.Line
			switch {
			case !slices.Contains(Names, n.Value):
				bad(n.Line, "%s: unknown setting %q (settings: %s)", c.Channel, n.Value, strings.Join(Names, ", "))
				continue
			case twice:
				bad(n.Line, "%s: %s is set twice (also line %d)", c.Channel, n.Value, at)
				continue
			case val.Kind != yaml.ScalarNode || val.Tag == "!!null":
				bad(val.Line, "%s: %s: want a value (a string, or default for the environment's)", c.Channel, n.Value)
				continue
			}
			fs := FileSetting{Name: n.Value, Value: val.Value, Set: val.Value != "default", Line: n.Line}
			if fs.Set {
				if err := s.check(fs.Name, fs.Value); err != nil {
					bad(val.Line, "%s: %s: %v", c.Channel, fs.Name, err)
					continue
				}
			}
			c.Settings = append(c.Settings, fs)
		}
		out = append(out, c)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return out, nil
}

// Change is one setting of a channel a settings file changes: from its record (OldSet false:
// the default) to the file's value (Set false: the default).
type Change struct {
	Team, Channel string
	Name          string
	Old, New      string
	OldSet, Set   bool
}

// Plan is what applying the file's settings of channel c (of team) changes: a setting whose
// record already holds the file's value (or, for "default", that has no record or a reset)
// changes nothing. Errors are the store's.
func (s *Settings) Plan(ctx context.Context, team string, c FileChannel) ([]Change, error) {
	cur, err := s.For(ctx, team, c.Channel)
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, f := range c.Settings {
		r, has := cur.Record(f.Name)
		if has == f.Set && (!f.Set || r.New == f.Value) {
			continue
		}
		out = append(out, Change{Team: team, Channel: c.Channel, Name: f.Name, Old: r.New, OldSet: has, New: f.Value, Set: f.Set})
	}
	return out, nil
}

// Apply records a planned change (Plan), by who and through via (session.ViaFile): one
// setting_changed event of the channel's ledger. Errors: the value's check (*InvalidError),
// or the store's.
func (s *Settings) Apply(ctx context.Context, c Change, by, via string) (session.ChannelSetting, error) {
	value := c.New
	if !c.Set {
		value = ""
	} else if err := s.check(c.Name, value); err != nil {
		return session.ChannelSetting{}, &InvalidError{Name: c.Name, Err: err}
	}
	return s.cfg.Store.SetChannelSetting(ctx, session.ChannelSetting{Team: c.Team, Channel: c.Channel, Name: c.Name,
		New: value, Set: c.Set, SetBy: by, Via: via})
}

// DefaultFrom says where the environment's default of name comes from ("LOGBOOK_MODEL"),
// "" when the configuration does not say.
func (s *Settings) DefaultFrom(name string) string {
	if s == nil {
		return ""
	}
	return s.cfg.DefaultFrom[name]
}
