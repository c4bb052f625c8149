// Package session is logbook's append-only log: every event of every Slack thread, in
// PostgreSQL, the one source of truth.
//
// # Model
//
// A session is one Slack thread, keyed by (team, channel, thread ts); [Store.Open] creates it
// idempotently, so two replicas opening the same thread get the same [ID]. A session's events
// have a dense seq 1..n, a time-ordered event id (UUIDv7), an explicit [Type], an [Actor]
// (kind + id), a JSON payload, an optional idempotency key (unique per session), and a hash
// chain: hash = sha256(prev_hash || header || payload_hash) with payload_hash =
// sha256(payload as PostgreSQL renders the jsonb). The payload hash is stored beside the
// payload so the retention path can later remove a payload and the chain still verifies.
//
// # Lifecycle of an append
//
//  1. [Store.Append] (or [Store.AppendWith] with an expected seq or a lease epoch) validates
//     every event first: known type, actor, payload size (default 1 MiB), text that PostgreSQL
//     cannot store. Invalid input returns a typed error and writes nothing.
//  2. One round trip calls the SQL function logbook_append, which takes a transaction-scoped
//     advisory lock for the session (appenders of other sessions never wait), reads the head,
//     checks the fencing epoch and the expected seq, skips events whose idempotency key is
//     already stored (returning the stored event with Duplicate set), and inserts the rest
//     with the chain computed in SQL. A batch is all or nothing. A single event that is no
//     turn marker (a Slack message, most of a turn's events, fenced or not) is one statement
//     instead (appendone.go, migration 00170): it moves the session's head, kept in
//     session_work with the lease's epoch, under the same lock, and inserts the event with the
//     same chain; what it cannot decide alone (a stored key, a stale expected seq or epoch, a
//     missing row) it leaves to logbook_append, which answers as before. The function's
//     PL/pgSQL call was most of an append's server work.
//  3. Readers use [Store.Events] (a positional slice of one session, filtered by type, oldest
//     or newest first, or the N events before a seq) or [Store.ReadAll] for cross-session reads
//     by global position that never skip a late-committing transaction.
//  4. [Store.Verify] recomputes a session's chain in Go, independently of the SQL that wrote
//     it, and reports the first broken seq.
//
// # Pending work and signals
//
// A session has pending work when its last user_message (or followup_signal: a signal about a
// pull request it follows, migration 00090) is above the Through of its latest turn_completed. The log keeps that state as it appends (table session_work, kept by
// the append for user_message and the turn markers, inside the append's transaction and
// under its lock; a user_message updates its session's row in place), so [Store.Pending] —
// the poll every replica runs — costs what the pending sessions cost, not what the log
// holds, and a retention purge of payloads does not change it. [Store.NotifyOwner] signals the one replica that holds a session's live lease
// through PostgreSQL NOTIFY (the others' listeners drop it unread), [Store.Notify] every
// replica; [Store.PendingWith] bounds a poll to the oldest sessions. [Listen] holds the
// dedicated LISTEN connection and calls its catch-up only once LISTEN is in place, so nothing
// signalled while it was away is lost. Signals are hints: Pending finds the work without them.
//
// # Leases and liveness
//
// A lease ([Store.AcquireLeaseWith]) is epoch-fenced: every append of its holder carries the
// epoch, and the database refuses a stale one. A replica that holds its liveness claim
// ([ListenClaimed], lock key [LockLivenessSeed]) takes leases as claimed; a claimed lease
// whose owner's claim is free (the owner's connection ended: the process died) may be taken
// before it expires, with a new epoch, and [Store.Pending] and [Store.Orphaned] count it as
// nobody's. An unclaimed lease is taken only once it expires or is released. [WatchPeers]
// waits on one live peer's claim, to learn of its death the moment the claim is freed;
// [Store.LeaseSession] starts a cell in one round trip (the session, its lease, its log).
//
// # Connections
//
// [Connect]'s pools open connections on demand and keep none when idle: a connection idle for
// [IdleConnTimeout] (or [PoolOptions].IdleTimeout) is closed, and every connection is replaced
// after about 30 minutes. Each shows in pg_stat_activity as application_name
// "logbook-<PoolOptions.Name>"; the LISTEN connection as "logbook-listen", [WatchPeers]' as
// "logbook-watch". [ServerLimits]
// reads the server's caps on connections; [ConnBudget] is what a fleet of replicas opens, per
// role, and [ConnBudget.Check] refuses one that does not fit in those caps.
//
// # Connection poolers
//
// [Connect] with [PoolOptions].Pooled works through PgBouncer in transaction pooling mode,
// where nothing session-scoped survives a transaction: no startup parameter but
// application_name, no named prepared statements, no SET ROLE (the login must inherit the
// role). [Listen] and [ListenClaimed] hold LISTEN and a session advisory lock: give them a
// URL of PostgreSQL itself, never the pooler's.
//
// # Reads on a standby
//
// [Standby] routes reads between a streaming standby (PostgreSQL's replication) and its
// primary; [ReadFrom] runs one read on the server it picks. [ReadAny] reads the standby as far
// as it has replayed; [ReadYourWrites] first waits, at most [StandbyOptions].MaxWait, until
// the standby has replayed the primary's flushed WAL position ([Standby.CatchUp]), else reads
// the primary. A standby that does not answer hands the read to the primary. [Reads] are the
// transcript reads over both; [Standby.Lag] measures how far behind the standby is. Writes,
// leases, claims and the cells' reads always use the primary. See standby.go.
//
// # Audit reads
//
// [Store.SessionIDs], [Store.Heads], [Store.HashAt] and [ScanEventText] are the reads that
// verification, checkpoints and exports need; no other package queries the log's tables.
// Every advisory-lock key, in Go or in the migrations' SQL, is listed in locks.go.
//
// # Schedules and hooks
//
// schedules.go keeps the records of sessions logbook starts itself (migration 00100, all
// append-only): schedules and their removals; each tick's claim ([Store.ClaimTick]: one
// replica, in order), its attempts ([Store.RetryTicks] takes over an expired one, once) and its
// run; and every hook delivery with its outcome ([Store.AcceptHook] tells a replay under a
// per-hook lock). Lock keys: [LockScheduleTicksSeed], [LockHookSeed].
//
// # Channel ledgers
//
// ledger.go keeps each channel's ledger (migration 00230): a session whose thread ts is
// [LedgerThread], its events the changes that shape the agent in the channel (settings,
// memory notes, repository, budget raises, schedules, connectors). Every write of those
// records appends its ledger event in the transaction that writes its row, the event's
// idempotency key naming the row; the rows are projections for fast reads, and
// [Store.CheckLedgers] finds one that disagrees with its ledger. Retention leaves a ledger
// alone but for a purged note's event.
//
// # Text PostgreSQL cannot store
//
// jsonb rejects U+0000 and unpaired surrogates, and invalid UTF-8 cannot be text at all. Such
// input is sanitised, not rejected: each offending character or byte becomes U+FFFD before the
// payload is encoded, and the stored event carries sanitized = true, so the change is visible
// and nothing is dropped. Payloads that are not JSON at all are rejected ([ErrInvalidPayload]).
//
// # Append-only
//
// The database enforces it: the application role logbook_app has INSERT and SELECT on
// sessions and events, and triggers reject UPDATE, DELETE and TRUNCATE for every role except
// the retention path. Edits and deletions in Slack become new events.
package session
