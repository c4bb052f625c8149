package slackemu

import "errors"

// Driver errors, wrapped with the ids involved; test them with errors.Is. (In a file
// of their own, as session's are: each package names the errors it returns.)
var (
	ErrNotFound     = errors.New("slackemu: not found")
	ErrNotInChannel = errors.New("slackemu: user not in channel")
	ErrArchived     = errors.New("slackemu: channel is archived")
)
