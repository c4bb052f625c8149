// Package audit makes the session log audit-grade: exports by actor and time window with a
// signed manifest, scheduled exports with checkpoints, chain verification, retention and
// legal holds, and an append-only record of who read what.
//
// # Export
//
// Exporter.Export streams every event in a half-open window [From, To) of created_at, for
// some actors (or all) and optionally one channel, in global order (position), to a
// destination: a *blob.Bucket from gocloud.dev (OpenBucket takes a plain directory or a
// file:// URL; s3://, gs:// and azblob:// work once cmd/logbook blank-imports
// gocloud.dev/blob/s3blob, gcsblob or azureblob). Memory is constant in the number of events
// (it grows only with the number of distinct sessions, actors and types). An export is a
// directory of files:
//
//	events.jsonl | events.csv   one event per line
//	access.jsonl | access.csv   access records (who exported, verified or held what) in the window
//	web_access.jsonl | .csv     the web pages' access_log in the window: page views, searches and
//	                            downloads by person (bot/web)
//	spend.jsonl | .csv          model calls' holds, charges and refusals in the window (model_spend):
//	                            channel, person, session, model, tokens, cost, and a charge's
//	                            source: provider, estimate (a call that failed part way) or none
//	                            (bot/budget)
//	budget_raises.jsonl | .csv  admins' raises of a budget for a day, with who raised it
//	schedules.jsonl | .csv      schedules added and removed (/logbook schedule), with who (started.go)
//	schedule_ticks.jsonl | .csv every tick claimed: due when, late, attempts, its post and session
//	hook_deliveries.jsonl | .csv every request to POST /hooks/<name> and its outcome (accepted,
//	                            replay, bad_signature, unknown_hook, too_large, failed)
//	automations.jsonl | .csv    every run of a schedule's tick or a hook's delivery (ok or
//	                            failed), and every pause (system) and resume (an admin)
//	files/<sha256>              with ExporterOptions.Files (logbook audit export --with-files): the
//	                            content of every file an exported event references (file_fetched
//	                            stored, file_upload), listed in the manifest's file_contents;
//	                            content gone (purged) is listed in missing_files instead
//	manifest.json               query, counts, first/last ids, chains, sha256 of every file
//	manifest.json.sig           base64 ed25519 signature of manifest.json, when a key is set
//
// Before reading, the export waits for every transaction that could still add to the
// window to finish: an event's created_at is taken at insert, so every event with
// created_at < To (To in the past, by at least ExporterOptions.Settle) was inserted by a
// transaction older than a fresh transaction id taken now; once all of those have finished,
// one REPEATABLE READ snapshot sees all of them. A late commit is never missed (sequence numbers
// are taken at INSERT but become visible at COMMIT, so a reader that bookmarks past a still-open
// lower one would lose that event for good).
// The files are spooled to local temporary files (ExporterOptions.SpoolDir) while that
// transaction reads, and uploaded only after it has ended, so a destination that is slow to
// accept or close a file never holds the snapshot open (PostgreSQL would end it after
// idle_in_transaction_session_timeout, SQLSTATE 25P03).
//
// An export's prefix must be empty (ErrNotEmpty); with ExporterOptions.Overwrite an earlier
// export there is replaced: ClearExport deletes its files, manifest first, after the new
// export's snapshot has been read, and never deletes an object that is no export's file.
//
// VerifyExport checks every file against the manifest and the manifest against its
// signature; any changed, missing or extra byte fails. Without a signature, only the files
// listed by the manifest are protected: sign exports that leave your hands.
//
// # Schedule
//
// Scheduler runs exports on a cron spec (seconds optional, CRON_TZ= prefix). Windows are
// half-open [start, end) in UTC between consecutive fire times; the fire times are computed
// on the wall clock of the spec's zone, so a DST change neither skips nor doubles a day (a
// 02:00 job on a spring-forward day fires at 03:00, a 01:30 job on a fall-back day fires
// once). Each window starts where the last succeeded one ended, so windows are contiguous
// and missed ones are caught up. A window is due once it is over by the database's clock
// (which stamps created_at), whatever this host's clock says, and a run whose export still
// saw the window open is recorded failed, never succeeded. Each window is exported under its
// own prefix (<schedule>/<start>_<end>/); a prefix that holds objects no run of the window
// left is a collision, recorded as a failed run that wrote nothing, never overwritten; what an
// earlier run of the window left (it failed or died midway) is cleared by the retry
// (ClearExport). Runs are recorded in audit_runs; a session advisory lock and a unique index
// make each window succeed once across replicas. Each run also writes a checkpoint of every
// session's head.
//
// # Verify, retain, hold
//
// Verify recomputes chains (session.Store.Verify) and, against a Checkpoint kept outside
// the database, detects a chain rewritten consistently by someone who disabled the
// triggers. Retention.Purge calls logbook_purge_expired, a SECURITY DEFINER function owned
// by logbook_retention, which nulls payloads of expired sessions not under a legal hold,
// removes what was derived from them (the session's search_docs rows, its title and first
// text in search_sessions: see migrations/00005_purge_projections.sql; its file references
// and the file content no other session references: migrations/00009_files.sql) and appends an
// audit_purges row per session. Content kept in a bucket (LOGBOOK_BLOB_URL) is marked by the
// purge; with Retention.WithFiles the same run deletes its objects, then its rows. Removing whole sessions (rows) is deliberately
// not implemented: it would break chain verification of what remains and the evidence that
// the session existed; if required, do it as logbook_retention with logbook.purge = 'on'
// after exporting, and keep the purge records.
//
// # Roles
//
// logbook_auditor reads everything and appends access, run and hold records; logbook_app has
// no access to the audit tables and cannot execute the purge function; logbook_retention
// owns it. Migration 00003 must run as a superuser or a member of logbook_retention.
package audit
