package slackemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// stateVersion is the format of Options.StateFile; a file of another version is refused.
const stateVersion = 1

// state is the part of a Server that Options.StateFile keeps: what the emulator needs to
// accept a reply in an old thread and answer conversations.replies, history, users.info,
// files.info and file downloads for it after a restart. Deliveries, acks, ephemerals,
// response URLs, download counts, faults and rate limits are not kept: they belong to a
// connection, not to the workspace.
type state struct {
	Version      int            `json:"version"`
	Team         string         `json:"team"`
	Users        []User         `json:"users"`
	Channels     []channelSaved `json:"channels"`
	LastMicro    int64          `json:"last_micro"`
	EventSeq     int            `json:"event_seq"`
	FileSeq      int            `json:"file_seq"`
	ClientMsgSeq int            `json:"client_msg_seq"`
	SlashSeq     int            `json:"slash_seq"`
	// Files holds every file with its content; absent from files written before files were kept.
	Files []fileSaved `json:"files,omitempty"`
	// CodeChannels are the code channels made (agents.go), oldest first; their channels are
	// in Channels.
	CodeChannels []CodeChannel `json:"code_channels,omitempty"`
}

// fileSaved is a stored file as Options.StateFile keeps it.
type fileSaved struct {
	File
	// Data is File.Content (which JSON skips), base64-encoded.
	Data        []byte `json:"content,omitempty"`
	User        string `json:"user"`
	Created     int64  `json:"created"`
	Deleted     bool   `json:"deleted,omitempty"`
	AltTxt      string `json:"alt_txt,omitempty"`
	SnippetType string `json:"snippet_type,omitempty"`
	UploadToken string `json:"upload_token,omitempty"`
	Length      int    `json:"length,omitempty"`
	Received    bool   `json:"received,omitempty"`
	Completed   bool   `json:"completed,omitempty"`
	// A canvas's access by channel or person id, and the channel it is tabbed in.
	Access map[string]string `json:"access,omitempty"`
	Tab    string            `json:"tab,omitempty"`
}

type channelSaved struct {
	Channel
	Created  int64     `json:"created"`
	Messages []Message `json:"messages"`
}

// snapshotLocked is the workspace as saved. Callers hold s.mu.
func (s *Server) snapshotLocked() state {
	st := state{Version: stateVersion, Team: s.opts.TeamID, LastMicro: s.lastMicro, EventSeq: s.eventSeq,
		FileSeq: s.fileSeq, ClientMsgSeq: s.clientMsgSeq, SlashSeq: s.slashSeq}
	for _, u := range s.users {
		st.Users = append(st.Users, *u)
	}
	slices.SortFunc(st.Users, func(a, b User) int { return strings.Compare(a.ID, b.ID) })
	for _, id := range s.channelOrder {
		ch := s.channels[id]
		c := channelSaved{Channel: ch.Channel, Created: ch.created, Messages: make([]Message, 0, len(ch.msgs))}
		c.Members = slices.Clone(ch.Members)
		for _, m := range ch.msgs {
			c.Messages = append(c.Messages, m.clone())
		}
		st.Channels = append(st.Channels, c)
	}
	for _, id := range s.fileOrder {
		f := s.files[id]
		st.Files = append(st.Files, fileSaved{
			File: f.meta(), Data: f.Content, User: f.user, Created: f.created, Deleted: f.deleted,
			AltTxt: f.altTxt, SnippetType: f.snippetType, UploadToken: f.uploadToken, Length: f.length,
			Received: f.received, Completed: f.completed, Access: f.access, Tab: f.tab,
		})
	}
	for _, id := range s.codeChannels.order {
		st.CodeChannels = append(st.CodeChannels, s.codeChannelCopyLocked(id))
	}
	return st
}

// loadState replaces the workspace built from Options with the one in path, when the file
// exists. Callers hold s.mu (or own s exclusively, in Start).
func (s *Server) loadState(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the emulator's state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("read the emulator's state %s: %w (move the file away to start with an empty workspace)", path, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("read the emulator's state %s: version %d, this emulator reads version %d (move the file away to start afresh)", path, st.Version, stateVersion)
	}
	if st.Team != s.opts.TeamID {
		return fmt.Errorf("read the emulator's state %s: it is workspace %s's, not %s's", path, st.Team, s.opts.TeamID)
	}
	s.users = map[string]*User{}
	for _, u := range st.Users {
		s.users[u.ID] = &u
	}
	// The bot user always exists, as in Start.
	if s.users[s.opts.BotUserID] == nil {
		s.users[s.opts.BotUserID] = &User{ID: s.opts.BotUserID, Name: s.opts.BotName, RealName: s.opts.BotName, IsBot: true, BotID: s.opts.BotID, TZ: "UTC"}
	}
	s.channels, s.channelOrder = map[string]*channelState{}, nil
	for _, c := range st.Channels {
		s.addChannelLocked(c.Channel)
		ch := s.channels[c.ID]
		ch.created = c.Created
		for i := range c.Messages {
			m := c.Messages[i]
			m.Streaming = false // streams end with the emulator that served them
			ch.add(&m)
		}
	}
	s.codeChannels = codeChannelsState{refused: s.codeChannels.refused}
	s.codeChannels.init()
	for _, c := range st.CodeChannels {
		cc := c
		s.codeChannels.byID[cc.ID] = &cc
		s.codeChannels.order = append(s.codeChannels.order, cc.ID)
		if cc.SessionID != "" {
			s.codeChannels.bySession[cc.SessionID] = cc.ID
		}
		if cc.Status != "" {
			s.setAgentStatusLocked(cc.ID+"/", cc.Status)
		}
	}
	s.files, s.fileOrder, s.uploads = map[string]*fileState{}, nil, map[string]string{}
	for _, f := range st.Files {
		file := f.File
		file.Content = f.Data
		s.addFileLocked(&fileState{
			File: file, user: f.User, created: f.Created, deleted: f.Deleted, altTxt: f.AltTxt, access: f.Access, tab: f.Tab,
			snippetType: f.SnippetType, uploadToken: f.UploadToken, length: f.Length,
			received: f.Received, completed: f.Completed,
		})
	}
	// Files of messages saved before files were kept: their metadata, without content.
	for _, c := range st.Channels {
		for _, m := range c.Messages {
			for _, f := range m.Files {
				if _, ok := s.files[f.ID]; !ok && f.ID != "" {
					sec, _, _ := strings.Cut(m.TS, ".")
					created, _ := strconv.ParseInt(sec, 10, 64)
					s.addFileLocked(&fileState{File: f, user: m.User, created: created})
				}
			}
		}
	}
	s.lastMicro, s.eventSeq, s.fileSeq, s.clientMsgSeq, s.slashSeq = st.LastMicro, st.EventSeq, st.FileSeq, st.ClientMsgSeq, st.SlashSeq
	return nil
}

// saveLocked writes the workspace to Options.StateFile atomically: a temporary file in the
// same directory, synced, then renamed over the old one, so a crash leaves the old state or
// the new one, never half of either. Callers hold s.mu.
func (s *Server) saveLocked() error {
	b, err := json.Marshal(s.snapshotLocked())
	if err != nil {
		return fmt.Errorf("save the emulator's state: %w", err)
	}
	path := s.opts.StateFile
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("save the emulator's state: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save the emulator's state to %s: %w", path, err)
	}
	return nil
}

// persistLocked saves the workspace if it changed since the last save. A failure is logged
// (the emulator keeps working in memory) and retried at the next change. Callers hold s.mu.
func (s *Server) persistLocked() {
	if s.opts.StateFile == "" || !s.dirty {
		return
	}
	if err := s.saveLocked(); err != nil {
		s.log.Error().Err(err).Msg("persist workspace")
		return
	}
	s.dirty = false
}
