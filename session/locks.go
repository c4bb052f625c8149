package session

// Advisory locks. Every PostgreSQL advisory-lock key logbook takes, in Go or inside an SQL
// function of migrations/, is listed here with its purpose, so that no two purposes share a
// key by accident (they would block each other). All keys are bigint keys (the one-argument
// pg_advisory_* functions); a test checks that every key written in the migrations is one of
// these.
//
// Keys taken inside SQL functions cannot use these constants; their literal values must stay
// equal to them:
//
//   - LockSessionSeed: hashtextextended(session id, 7461) in logbook_append,
//     logbook_acquire_lease, logbook_renew_lease, logbook_release_lease
//     (migrations/00001_log.sql) and per session in logbook_purge_expired (00003_audit.sql,
//     00005_purge_projections.sql).
//   - LockRetention: 7461002 in logbook_purge_expired (00003_audit.sql, 00005).
//   - LockSearchIndexer: 7461004 in logbook_purge_expired (00005_purge_projections.sql), so
//     that no indexer batch writes the search projection while a purge empties it.
//   - LockLivenessSeed: hashtextextended(owner, 7461005) in logbook_claim_free
//     (00007_liveness.sql), which logbook_acquire_lease and Pending call.
const (
	// LockSessionSeed is the seed of the per-session lock, hashtextextended(session id::text,
	// LockSessionSeed), transaction-scoped. It serialises one session's appends, lease changes
	// and purge, so appenders of other sessions never wait.
	LockSessionSeed int64 = 7461

	// LockTestTemplate serialises migrations/pgtest's builders of the template database across
	// test processes (session-scoped, on the server's maintenance database).
	LockTestTemplate int64 = 7461001

	// LockRetention serialises legal-hold changes (audit.AddHold, audit.RemoveHold) with
	// retention purges (logbook_purge_expired), transaction-scoped, so a purge never misses a
	// hold committed just before it. RebuildProjections takes it too (before the ledgers'
	// LockSessionSeed locks), so no memory purge empties a note while a rebuild rewrites it.
	LockRetention int64 = 7461002

	// LockScheduleSeed is the seed of a scheduled export's lock, hashtextextended(schedule
	// name, LockScheduleSeed), session-scoped (audit.Scheduler.Tick): one replica runs a
	// schedule's tick at a time.
	LockScheduleSeed int64 = 7461003

	// LockSearchIndexer serialises search indexers (session/search.Indexer: replicas and
	// one-shot CLI catch-ups), transaction-scoped around each batch; the retention purge takes
	// it too (after LockRetention) before it removes a purged session's projection rows. It
	// used to be 7461002,
	// LockRetention's key, so indexing and purges or hold changes waited for each other.
	LockSearchIndexer int64 = 7461004

	// LockLivenessSeed is the seed of a replica's liveness claim, hashtextextended(lease
	// owner, LockLivenessSeed). The replica holds it session-scoped on its dedicated LISTEN
	// connection for its whole life (ListenClaimed), so PostgreSQL frees it the moment that
	// connection dies; logbook_claim_free tries it shared and transaction-scoped (never
	// keeping it, and never in the way of another check) to tell a dead lease owner from a
	// live one.
	LockLivenessSeed int64 = 7461005

	// LockScheduleTicksSeed is the seed of a schedule's tick lock, hashtextextended(schedule
	// id, LockScheduleTicksSeed), transaction-scoped (Store.ClaimTick): a schedule's ticks
	// are claimed one at a time, in order.
	LockScheduleTicksSeed int64 = 7461100

	// LockHookSeed is the seed of a hook's lock, hashtextextended(hook name, LockHookSeed),
	// transaction-scoped (Store.AcceptHook): a delivery and its replay are told apart under it.
	LockHookSeed int64 = 7461101

	// LockAutomationSeed is the seed of a schedule's or hook's pause lock,
	// hashtextextended(kind/name, LockAutomationSeed), transaction-scoped
	// (Store.PauseAutomation, ResumeAutomation): one pause per run of failures, however many
	// replicas see it.
	LockAutomationSeed int64 = 7461102
)
