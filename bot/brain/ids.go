package brain

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// Tool-call ids are written to the log as the provider that made them sent them, and a session
// may be continued by another provider (LOGBOOK_MODEL changed, or a fallback server): some
// OpenAI-compatible servers send ids like "functions.run_command:0", which the Anthropic API
// refuses (tool_use ids must match ^[a-zA-Z0-9_-]+$), and OpenAI refuses ids over 40
// characters. Each provider maps the ids of a request on the wire only, with a pure function
// of the id, so a tool_use and its tool_result always get the same wire id, every request
// gets the same ids, and an id the API accepts is sent unchanged.

var anthropicIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// anthropicMaxID bounds the mapped ids; the API's own ids are about 30 characters.
const anthropicMaxID = 64

// anthropicToolID is the id sent to the Anthropic API for a logged tool-call id.
func anthropicToolID(id string) string {
	if len(id) <= anthropicMaxID && anthropicIDPattern.MatchString(id) {
		return id
	}
	var sb strings.Builder
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
		if sb.Len() >= 40 {
			break
		}
	}
	return sb.String() + "_" + idHash(id)
}

// openAIMaxID is the longest tool_call id Chat Completions accepts.
const openAIMaxID = 40

// openAIToolID is the id sent to an OpenAI-compatible API for a logged tool-call id.
func openAIToolID(id string) string {
	if len(id) <= openAIMaxID {
		return id
	}
	return "call_" + idHash(id)
}

// idHash is 12 bytes of the id's SHA-256 in hex: the part of a mapped id that keeps distinct
// ids distinct.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12])
}
