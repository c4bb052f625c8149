package audit

// The sessions logbook starts itself (migration 00100, issue 32) in an export's window:
//
//	schedules.*       every schedule added or removed (change added|removed), with who (actor;
//	                  system, with the reason, when logbook stopped it: its admin left)
//	schedule_ticks.*  every tick claimed: when it was due, late, how many it stood for
//	                  (missed), attempts, which replica, its post (ts) and session, who set it,
//	                  and why it can never post (failed: Slack refused it for good)
//	hook_deliveries.* every signed delivery to POST /hooks/<name>: accepted, replay, failed, its
//	                  signed timestamp, with its post and session when it ran (refused
//	                  requests are counted, not stored: migration 00105)
//	automations.*     every run of a schedule's tick or a hook's delivery (change run: ok or
//	                  failed and why, late, its post and session) and every pause (by the
//	                  system, with the reason) and resume (by an admin): migration 00210
//
// An export for one channel has that channel's rows only.
var (
	scheduleRecordColumns = []recordColumn{{"change", 's'}, {"schedule_id", 'n'}, {"at", 's'}, {"team", 's'},
		{"channel", 's'}, {"spec", 's'}, {"prompt", 's'}, {"actor", 's'}, {"reason", 's'}}
	tickRecordColumns = []recordColumn{{"schedule_id", 'n'}, {"tick", 's'}, {"at", 's'}, {"channel", 's'},
		{"set_by", 's'}, {"late", 'b'}, {"missed", 'n'}, {"attempts", 'n'}, {"claimed_by", 's'}, {"ts", 's'},
		{"session_id", 's'}, {"found", 'b'}, {"ran_at", 's'}, {"failed", 's'}}
	hookRecordColumns = []recordColumn{{"id", 'n'}, {"at", 's'}, {"hook", 's'}, {"delivery_id", 's'},
		{"body_sha256", 's'}, {"body_bytes", 'n'}, {"outcome", 's'}, {"channel", 's'}, {"remote_addr", 's'},
		{"reason", 's'}, {"of", 'n'}, {"signed_at", 's'}, {"ts", 's'}, {"session_id", 's'}}
	automationRecordColumns = []recordColumn{{"change", 's'}, {"at", 's'}, {"kind", 's'}, {"name", 's'},
		{"channel", 's'}, {"actor", 's'}, {"ok", 'b'}, {"late", 'b'}, {"error", 's'}, {"reason", 's'}, {"ref", 's'},
		{"ts", 's'}, {"session_id", 's'}}
)

const utcText = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`

const sqlSchedulesInWindow = `
SELECT change, id, to_char(at AT TIME ZONE 'UTC', ` + utcText + `), team, channel, spec, prompt, actor, reason FROM (
  SELECT 'added' AS change, s.id, s.added_at AS at, s.team, s.channel, s.spec, s.prompt, s.added_by AS actor, '' AS reason
  FROM schedules s WHERE s.added_at >= $1 AND s.added_at < $2 AND ($3::text = '' OR s.channel = $3)
  UNION ALL
  SELECT 'removed', s.id, r.removed_at, s.team, s.channel, s.spec, s.prompt, r.removed_by, r.reason
  FROM schedule_removals r JOIN schedules s ON s.id = r.schedule_id
  WHERE r.removed_at >= $1 AND r.removed_at < $2 AND ($3::text = '' OR s.channel = $3)
) c ORDER BY at, id`

const sqlTicksInWindow = `
SELECT t.schedule_id, to_char(t.tick AT TIME ZONE 'UTC', ` + utcText + `), to_char(t.claimed_at AT TIME ZONE 'UTC', ` + utcText + `),
       s.channel, s.added_by, t.late, t.missed,
       (SELECT max(a.attempt) FROM schedule_tick_attempts a WHERE a.schedule_id = t.schedule_id AND a.tick = t.tick),
       t.claimed_by, r.ts, r.session_id::text, r.found, to_char(r.at AT TIME ZONE 'UTC', ` + utcText + `), f.error
FROM schedule_ticks t JOIN schedules s ON s.id = t.schedule_id
LEFT JOIN schedule_tick_runs r ON r.schedule_id = t.schedule_id AND r.tick = t.tick
LEFT JOIN schedule_tick_failures f ON f.schedule_id = t.schedule_id AND f.tick = t.tick
WHERE t.claimed_at >= $1 AND t.claimed_at < $2 AND ($3::text = '' OR s.channel = $3)
ORDER BY t.claimed_at, t.schedule_id`

const sqlHooksInWindow = `
SELECT d.id, to_char(d.at AT TIME ZONE 'UTC', ` + utcText + `), d.hook, d.delivery_id, d.body_sha256, d.body_bytes, d.outcome,
       d.channel, d.remote_addr, d.reason, d.of, to_char(d.signed_at AT TIME ZONE 'UTC', ` + utcText + `), r.ts, r.session_id::text
FROM hook_deliveries d LEFT JOIN hook_delivery_runs r ON r.delivery = d.id
WHERE d.at >= $1 AND d.at < $2 AND ($3::text = '' OR d.channel = $3)
ORDER BY d.id`

const sqlAutomationsInWindow = `
SELECT change, to_char(at AT TIME ZONE 'UTC', ` + utcText + `), kind, name, channel, actor, ok, late, error, reason, ref, ts, session_id FROM (
  SELECT 'run' AS change, r.at, r.kind, r.name, r.channel, 'system' AS actor, r.ok, r.late, r.error, '' AS reason, r.ref,
         r.ts, r.session_id::text AS session_id, 1 AS src, r.id
  FROM automation_runs r WHERE r.at >= $1 AND r.at < $2 AND ($3::text = '' OR r.channel = $3)
  UNION ALL
  SELECT p.action, p.at, p.kind, p.name, p.channel, p.actor, NULL, NULL, '', p.reason, '', '', NULL, 2, p.id
  FROM automation_pauses p WHERE p.at >= $1 AND p.at < $2 AND ($3::text = '' OR p.channel = $3)
) c ORDER BY at, src, id`
