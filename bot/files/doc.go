// Package files fetches files shared in sessions' threads from Slack (url_private, with the
// bot token, up to a size limit, retrying what may pass); session/filestore keeps them.
package files
