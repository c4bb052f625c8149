// Package filestore keeps the content of files shared in (or handed back to) sessions'
// threads, content-addressed by sha256: in PostgreSQL (the default) or in a gocloud.dev/blob
// bucket (LOGBOOK_BLOB_URL). Either way the session's reference and the hash are in the
// database (session.Store.PutFile) and the hash in the log's event, so the chain covers the
// content and a retention purge removes what only purged sessions held (a bucket's copy is
// deleted by the retention run, Store.Delete).
package filestore
