package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// envGroup is a heading of the settings table: which command reads its settings, what
// they are about, and the docs pages that explain them.
type envGroup struct {
	Key     string // what a setting's Group names
	Command string // serve (also read by dev) or audit
	Title   string
	Pages   string // Markdown links to the pages that explain the group, for docs/configuration.md
}

// envSetting is one environment variable a command reads: the single source of `logbook serve
// --help`, `logbook audit --help` and docs/configuration.md (settings_doc_test.go keeps them
// and the loader in step).
type envSetting struct {
	Name    string
	Default string   // what applies when it is unset; "" when nothing does
	Meaning string   // what it does and its syntax: plain text, no final period
	Group   string   // a envGroup's Key
	Also    []string // other names read as the same setting
}

// envGroups is the table's headings, in the order help and docs show them.
var envGroups = []envGroup{
	{"slack", "serve", "Slack", "[Slack](slack.md), [deploy](deploy.md)"},
	{"database", "serve", "The database", "[deploy](deploy.md), [many replicas](replicas.md)"},
	{"cells", "serve", "Cells, leases and failover", "[many replicas](replicas.md)"},
	{"model", "serve", "The model", "[budgets](budgets.md), [files](files.md)"},
	{"threads", "serve", "Threads and replies", "[threads](threads.md), [traces and streams](traces.md)"},
	{"approvals", "serve", "Approvals", "[approvals](approvals.md)"},
	{"channels", "serve", "Admins and channels", "[channel settings](channel-settings.md)"},
	{"files", "serve", "Files", "[files](files.md)"},
	{"sandbox", "serve", "The sandbox and the channel's repository", "[sandbox](sandbox.md)"},
	{"pulls", "serve", "Pull requests", "[follow-through](follow-through.md)"},
	{"connectors", "serve", "Connectors (MCP)", "[connectors](connectors.md)"},
	{"budgets", "serve", "Prices and budgets", "[budgets](budgets.md)"},
	{"started", "serve", "Schedules and hooks", "[schedules and hooks](schedules-and-hooks.md)"},
	{"web", "serve", "The HTTP address and the web pages", "[web pages](web.md)"},
	{"oidc", "serve", "Sign-in with OpenID Connect", "[web pages](web.md#sign-in-with-your-identity-provider-openid-connect)"},
	{"traces", "serve", "Traces and logs", "[traces](traces.md)"},
	{"streams", "serve", "The record streamed out", "[streams](streams.md)"},
	{"serve-audit", "serve", "Audit inside serve", "[audit](audit.md)"},
	{"audit", "audit", "Audit", "[audit](audit.md)"},
}

// envSettings is every environment variable serve, dev and audit read.
var envSettings = []envSetting{
	// Slack.
	{Name: "SLACK_APP_TOKEN", Group: "slack", Meaning: "app-level token, starting xapp- (scope connections:write)"},
	{Name: "SLACK_BOT_TOKEN", Group: "slack", Meaning: "bot token, starting xoxb-"},
	{Name: "SLACK_API_URL", Group: "slack", Default: "https://slack.com/api/", Meaning: "Web API base URL"},
	{Name: "LOGBOOK_PRIVATE_NOTE", Group: "slack", Default: "on",
		Meaning: "on | off: whether a mention in a private channel, group DM or DM gets one short ephemeral note (their messages are never stored)"},
	{Name: "LOGBOOK_WORKSPACE_DOMAIN", Group: "slack",
		Meaning: "e.g. acme.slack.com, for permalinks in search hits (search and transcript read it too)"},

	// The database.
	{Name: "DATABASE_URL", Group: "database",
		Meaning: "PostgreSQL (run 'logbook migrate up' first), or a PgBouncer with LOGBOOK_DB_POOLER=pgbouncer"},
	{Name: "LOGBOOK_DB_POOLER", Group: "database", Default: "none; a PgBouncer at DATABASE_URL is detected and refused with what to set",
		Meaning: "pgbouncer | none. pgbouncer: DATABASE_URL is a PgBouncer in transaction pooling mode; logbook then sends no " +
			"startup parameter but application_name, uses no prepared statements, and does not SET ROLE (the login must " +
			"be a member of LOGBOOK_DB_ROLE; set idle_in_transaction_session_timeout on it with ALTER ROLE)"},
	{Name: "LOGBOOK_DIRECT_DATABASE_URL", Group: "database", Default: "DATABASE_URL; required with LOGBOOK_DB_POOLER=pgbouncer",
		Meaning: "PostgreSQL itself, for what needs a session of its own: LISTEN, the liveness claim, scheduled audit exports " +
			"(with LOGBOOK_LIVENESS=heartbeat only the exports)"},
	{Name: "LOGBOOK_DB_POOL", Group: "database", Default: "8", Meaning: "connections of the main pool: cells, indexer, web pages"},
	{Name: "LOGBOOK_DB_GATEWAY_POOL", Group: "database", Default: "4", Meaning: "connections of the gateway's pool: its appends"},
	{Name: "LOGBOOK_REPLICAS", Group: "database", Default: "1",
		Meaning: "how many replicas share the database. At start serve logs the connection budget and refuses one that " +
			"cannot fit: REPLICAS x (main + gateway + listen 1 [+ watch 1 above one replica] (neither with LOGBOOK_LIVENESS=heartbeat) [+ audit 4 + retention 2 with " +
			"LOGBOOK_AUDIT_SCHEDULE]) + LOGBOOK_DB_RESERVE must not exceed max_connections - superuser_reserved_connections - " +
			"reserved_connections, nor the database's or login's CONNECTION LIMIT (through PgBouncer main and gateway are " +
			"PgBouncer's clients, there is no watch, and LOGBOOK_PGBOUNCER_POOL is counted once instead). Idle connections close after 1m"},
	{Name: "LOGBOOK_PGBOUNCER_POOL", Group: "database", Default: "20 with LOGBOOK_DB_POOLER=pgbouncer (PgBouncer's default_pool_size); else unset",
		Meaning: "the server connections the PgBouncer at DATABASE_URL may open to this database (its default_pool_size + " +
			"reserve_pool_size): counted once in the fleet's budget. Behind PgBouncer each replica holds one direct " +
			"connection (LISTEN and its liveness claim; no watch), so fifty replicas need 50 + this + LOGBOOK_DB_RESERVE; " +
			"with LOGBOOK_LIVENESS=heartbeat none, so any number need this + LOGBOOK_DB_RESERVE"},
	{Name: "LOGBOOK_DB_RESERVE", Group: "database", Default: "6",
		Meaning: "connections left for other clients: logbook audit (4), migrate (1), psql (1)"},
	{Name: "LOGBOOK_READ_DATABASE_URL", Group: "database",
		Meaning: "a streaming standby of DATABASE_URL's primary (PostgreSQL's replication, e.g. made with pg_basebackup -R): " +
			"search, transcripts and the web pages read it; writes, claims and the bot's own reads use DATABASE_URL. A " +
			"transcript shows every write committed before it was asked for: it waits for the standby to replay the " +
			"primary's WAL position, else reads the primary. A standby that does not answer sends reads to the primary. " +
			"Lag: /readyz, logbook_standby_*"},
	{Name: "LOGBOOK_READ_MAX_WAIT", Group: "database", Default: "2s", Meaning: "how long such a read waits for the standby"},
	{Name: "LOGBOOK_DB_ROLE", Group: "database", Default: "logbook_app", Meaning: "role assumed on every connection"},
	{Name: "LOGBOOK_GATEWAY_APPEND_LANES", Group: "database", Default: "off, one transaction an envelope",
		Meaning: "group commit of the gateway's appends: envelopes that arrive together are stored in one transaction, " +
			"in at most this many lanes (1 to 64). Each envelope is still acked only after the commit that stored it. " +
			"Opt-in: see docs/replicas.md"},

	// Cells, leases and failover.
	{Name: "LOGBOOK_IDLE_TIMEOUT", Group: "cells", Default: "10m", Meaning: "idle time before a cell exits"},
	{Name: "LOGBOOK_LEASE_TTL", Group: "cells", Default: "30s", Meaning: "session lease length"},
	{Name: "LOGBOOK_POLL_INTERVAL", Group: "cells", Default: "5s", Meaning: "how often to look for sessions with unanswered messages"},
	{Name: "LOGBOOK_WAKE_LIMIT", Group: "cells", Default: "32",
		Meaning: "the most sessions the start and the polls wake at once, or off: a replica that comes back to a " +
			"backlog works through it that many at a time, oldest unanswered first, each room given to the next as a " +
			"session goes idle. Messages and peers' signals are not held back by it"},
	{Name: "LOGBOOK_PEER_ADDR", Group: "cells", Default: "off: follow-ups are routed by NOTIFY",
		Meaning: "host or host:port where the other replicas reach this replica's HTTP server (LOGBOOK_HTTP_ADDR; " +
			"the port defaults to the one it listens on), e.g. the pod's IP. A follow-up that reaches another replica " +
			"is then posted to this one alone, with a token only the database knows, instead of a NOTIFY, which wakes " +
			"every replica and costs each a transaction. A post that fails falls back to NOTIFY. For a fleet: see docs/replicas.md"},
	{Name: "LOGBOOK_LIVENESS", Group: "cells", Default: "lock",
		Meaning: "lock | heartbeat: how a replica proves it is alive, so that peers take its sessions the moment it is " +
			"not. lock: a lock held on a connection of its own to PostgreSQL itself (LOGBOOK_DIRECT_DATABASE_URL), which " +
			"also LISTENs; freed the moment the process dies. heartbeat: a row renewed every 5s through DATABASE_URL, " +
			"trusted for 12s and held by the database for 15s; the replica opens no connection of its own (behind " +
			"PgBouncer, a fleet of any size is PgBouncer's pool and the reserve), needs LOGBOOK_PEER_ADDR, and a replica " +
			"that dies without SIGTERM frees its sessions up to 15s later. See docs/replicas.md"},
	{Name: "LOGBOOK_DRAIN_TIMEOUT", Group: "cells", Default: "20s, at most 10m",
		Meaning: "on SIGTERM (a rolling deploy): new envelopes are left to the other replicas (Slack redelivers them), " +
			"idle sessions are handed over at once, running turns may finish for this long, then they are handed over " +
			"too: the lease released and a peer woken, which resumes the turn from the log. A replica that dies without " +
			"SIGTERM frees its sessions as soon as PostgreSQL sees its connection close; one cut off from the database " +
			"keeps them until LOGBOOK_LEASE_TTL runs out"},

	// The model.
	{Name: "LOGBOOK_MODEL", Group: "model",
		Default: "anthropic if ANTHROPIC_API_KEY is set, else openai if OPENAI_API_KEY or OPENAI_BASE_URL is set; serve never falls back to offline silently",
		Meaning: "anthropic:<model> | openai:<model> | offline"},
	{Name: "ANTHROPIC_API_KEY", Group: "model", Meaning: "Anthropic's API key"},
	{Name: "ANTHROPIC_BASE_URL", Group: "model", Default: "Anthropic's API", Meaning: "another address for Anthropic's API"},
	{Name: "OPENAI_API_KEY", Group: "model", Meaning: "the OpenAI-compatible server's API key"},
	{Name: "OPENAI_BASE_URL", Group: "model", Default: "OpenAI's API",
		Meaning: "an OpenAI-compatible server's address (a local one needs no key)"},
	{Name: "LOGBOOK_MODEL_VISION", Group: "model", Default: "auto",
		Meaning: "auto | on | off: whether shared images are sent to the model; auto sends them to Anthropic and " +
			"api.openai.com, not to other OpenAI-compatible servers (a text-only model would refuse them), which are " +
			"told of the image instead"},
	{Name: "LOGBOOK_MAX_OUTPUT_TOKENS", Group: "model", Default: "4096",
		Meaning: "output tokens per model call. Sent as max_completion_tokens to GPT-5 and o-series models (any base " +
			"URL), else max_tokens; a server refusing one gets the other. With Anthropic, a limit the SDK will not send " +
			"unstreamed is streamed even under LOGBOOK_STREAM=off"},
	{Name: "LOGBOOK_MAX_CONTINUATIONS", Group: "model", Default: "2",
		Meaning: "how many times a reply cut at LOGBOOK_MAX_OUTPUT_TOKENS is continued"},
	{Name: "LOGBOOK_REPEAT_LIMIT", Group: "model", Default: "3", Meaning: "a tool call failing the same way this often ends the turn"},
	{Name: "LOGBOOK_CONTEXT_BUDGET", Group: "model", Default: "100000",
		Meaning: "history size in tokens before older turns are summarised"},

	// Threads and replies.
	{Name: "LOGBOOK_THREAD_REPLIES", Group: "threads",
		Default: "addressed",
		Meaning: "which messages in a session's thread the bot answers: addressed (all but asides — \"(aside) …\", " +
			"\"!aside …\" — and messages that mention someone else and not the bot), mentions (only those that mention " +
			"the bot) or all. Every message is recorded; \"mute\" and \"unmute\" in a thread silence and resume the bot there"},
	{Name: "LOGBOOK_THREAD_REPLIES_PER_MINUTE", Group: "threads", Default: "10",
		Meaning: "replies one thread may get per minute, or off: a guard against two bots answering each other. A " +
			"turn over it waits, then answers every message the thread got meanwhile at once"},
	{Name: "LOGBOOK_MIDTURN", Group: "threads", Default: "steer",
		Meaning: "steer | queue: a message written while a turn runs reaches the model at its next call in that turn " +
			"(recorded as steered), or waits for the next turn"},
	{Name: "LOGBOOK_STREAM", Group: "threads", Default: "auto",
		Meaning: "auto | off: auto shows a status at once, then the reply streamed as it is written with a card per " +
			"tool call (chat.startStream; a message updated as it grows where streaming is unavailable); off posts " +
			"the whole reply at the end"},
	{Name: "LOGBOOK_STREAM_INTERVAL", Group: "threads", Default: "1s", Meaning: "least time between two appends to a live message"},
	{Name: "LOGBOOK_PUBLIC_URL", Group: "threads",
		Meaning: "the web pages' external address (e.g. https://logbook.example.com), for links from Slack to a " +
			"session's transcript"},
	{Name: "LOGBOOK_REPLY_FOOTER", Group: "threads", Default: "link when LOGBOOK_PUBLIC_URL is set, else off",
		Meaning: "off | link | usage: a small line under each final reply with the transcript link and, with usage, " +
			"the turn's tokens and cost"},

	// Approvals.
	{Name: "LOGBOOK_TOOL_APPROVAL", Group: "approvals", Default: "allow for every tool",
		Meaning: "per-tool approval policy, e.g. run_command=ask,write_file=ask,*=allow (modes allow, ask, deny; tools " +
			"run_command, read_file, write_file, attach_file, search_sessions, read_log; mcp__<server>__<tool> " +
			"patterns (mcp__sentry__*, mcp__*) name the connectors' tools). An entry CHANNEL/tool=mode (e.g. " +
			"C0123ABCD/run_command=allow) holds in that channel only and wins. ask posts a card with Approve and Deny, " +
			"which waits past LOGBOOK_IDLE_TIMEOUT; a call too long for the card is cut with a link to the whole call " +
			"(LOGBOOK_PUBLIC_URL), and denied without asking when that is unset. ask takes options after a space: " +
			"approvers:N (N different people must approve), not_requester (the person whose message started the turn " +
			"may not approve), approvers_in:<user group id> (only its members decide; needs usergroups:read), e.g. " +
			"run_command=ask approvers:2 not_requester; its card's Allow for 30 min in this thread grants that rule " +
			"and tool in the thread (docs/approvals.md)"},
	{Name: "LOGBOOK_TOOL_APPROVERS", Group: "approvals", Also: []string{"LOGBOOK_APPROVERS"},
		Default: "thread: anyone of this workspace's organisation who has posted in the thread; people of another organisation in a Slack Connect channel may talk, not approve",
		Meaning: "who may decide a card: thread, or a comma list of Slack user ids (any organisation's)"},
	{Name: "LOGBOOK_APPROVAL_TIMEOUT", Group: "approvals", Default: "30m",
		Meaning: "how long a card waits for a decision; a timeout is a denial"},

	// Admins and channels.
	{Name: "LOGBOOK_ADMINS", Group: "channels",
		Meaning: "Slack user ids (comma-separated) who may set a channel's repository with /logbook repo " +
			"<https-url> [branch] (or off), which wins over LOGBOOK_REPOS, is kept with who set it and when, and " +
			"applies to the channel's next sandboxes; a channel's settings with /logbook config <name> <value> (model, " +
			"instructions, approvals, thread_replies, daily_budget, setup), each change a record; and raise a " +
			"budget (/logbook budget raise)"},

	// Files.
	{Name: "LOGBOOK_FILE_MAX", Group: "files", Default: "20M",
		Meaning: "largest shared file fetched, e.g. 20M; bigger ones are named to the model and in the reply, not " +
			"fetched (files:read)"},
	{Name: "LOGBOOK_BLOB_URL", Group: "files", Default: "PostgreSQL",
		Meaning: "where shared files' content is kept: a file:// URL of a directory (file:///var/lib/logbook/files; " +
			"this build has no other bucket driver) or unset for PostgreSQL; content-addressed by sha256"},

	// The sandbox and the channel's repository.
	{Name: "LOGBOOK_SANDBOX", Group: "sandbox", Default: "bwrap if installed, else none",
		Meaning: "bwrap | process | none (process runs commands WITHOUT isolation, as logbook's own user)"},
	{Name: "LOGBOOK_SANDBOX_DIR", Group: "sandbox", Default: "the user cache dir; /var/lib/logbook/sandboxes as root",
		Meaning: "workspaces directory"},
	{Name: "LOGBOOK_SANDBOX_NETWORK", Group: "sandbox", Default: "off",
		Meaning: "on to let sandboxed commands use the host's whole network (LOGBOOK_SANDBOX_EGRESS is the narrow way)"},
	{Name: "LOGBOOK_SANDBOX_EGRESS", Group: "sandbox", Default: "none: no network",
		Meaning: "what sandboxed commands may reach, through a proxy logbook runs outside the sandbox: host:port " +
			"patterns, e.g. registry.npmjs.org:443,*.pythonhosted.org:443,pypi.org:443 (a name never reaches a private " +
			"address; name one by its address). Nothing else is reachable, and every connection is recorded " +
			"(egress_connection). With LOGBOOK_REPOS the checkout fetches and pushes through it too, the token added " +
			"outside the sandbox; pushes to the base branch are refused"},
	{Name: "LOGBOOK_SANDBOX_DISK", Group: "sandbox", Default: "none",
		Meaning: "a workspace's disk quota, e.g. 2G. Run as root, each workspace is a loop-mounted filesystem of that " +
			"size (plus 1/32 and 1 MiB of slack), so a command is stopped as it writes past it, and its result says so; " +
			"otherwise usage is measured after each command, and one command may overshoot. Over the quota, writes " +
			"fail until files are removed"},
	{Name: "LOGBOOK_SANDBOX_MEMORY", Group: "sandbox", Default: "2G",
		Meaning: "a sandbox's memory, e.g. 1G: for the sandbox as a whole where a memory cgroup is usable (v2 " +
			"delegated to logbook, or v1 as root); without one it bounds each PROCESS only (RLIMIT_DATA), and several " +
			"processes together may use more — the startup log says which (\"memory_bound\")"},
	{Name: "LOGBOOK_SETUP_COMMAND", Group: "sandbox",
		Meaning: "a command (npm ci, go mod download) each new sandbox runs once before the first model call, unless " +
			"the channel's settings say otherwise; its output is a setup_result, a failure is said under the reply, " +
			"and the workspace it leaves is cached per commit"},
	{Name: "LOGBOOK_SETUP_EGRESS", Group: "sandbox",
		Meaning: "host:port patterns the setup may reach besides LOGBOOK_SANDBOX_EGRESS, only while it runs (e.g. " +
			"registry.npmjs.org:443,proxy.golang.org:443)"},
	{Name: "LOGBOOK_REPOS", Group: "sandbox",
		Meaning: "each channel's repository (checked out in its sandboxes, and for create_pull_request): " +
			"CHANNEL=owner/name[@base] entries, *=owner/name[@base] for the rest (base default main)"},
	{Name: "LOGBOOK_REPO_URL", Group: "sandbox", Default: "https://github.com/{repo}.git",
		Meaning: "where a channel's repository is cloned from, {repo} for owner/name; the sandbox gets a checkout of " +
			"its base branch from a mirror on this host, at a recorded commit, and its uncommitted work is saved when " +
			"it closes and restored in the next one"},

	// Pull requests.
	{Name: "GITHUB_TOKEN", Group: "pulls", Meaning: "token logbook (never the sandbox) clones and opens pull requests with"},
	{Name: "LOGBOOK_GITHUB_API_URL", Group: "pulls", Default: "https://api.github.com",
		Meaning: "GitHub's REST API (GitHub Enterprise: https://HOST/api/v3)"},
	{Name: "LOGBOOK_FOLLOWUP_MAX", Group: "pulls", Default: "3",
		Meaning: "attempts per pull request a session opened and follows: a failed check or a review asking for " +
			"changes wakes the session to fix it and push to the same branch; after the last, the thread says so and " +
			"names who should look; all checks green is said once; a merge or close ends it"},
	{Name: "LOGBOOK_GITHUB_WEBHOOK_SECRET", Group: "pulls", Default: "no webhook endpoint",
		Meaning: "the secret of GitHub's webhook at POST /webhooks/github (events check_run, check_suite, status, " +
			"pull_request_review, pull_request_review_comment, pull_request), verified with X-Hub-Signature-256; 16+ " +
			"characters. A delivery is taken once by its id and once by its body (7 days), and a pull request is " +
			"looked at at most once per 2s for its deliveries"},
	{Name: "LOGBOOK_FOLLOWUP_POLL", Group: "pulls", Default: "60s without a webhook secret, off with one",
		Meaning: "how often each followed pull request's checks and reviews are polled instead: off, or at least 10s; by " +
			"one replica of the fleet, with conditional requests (ETag), and paused on every replica by GitHub's rate limit"},
	{Name: "LOGBOOK_FOLLOWUP_BOTS", Group: "pulls", Default: "reviews by bots and by logbook's own account are not followed",
		Meaning: "bot accounts (comma-separated logins, e.g. coderabbitai[bot]; * for all) whose reviews are followed"},
	{Name: "LOGBOOK_FOLLOWUP_REVIEWERS", Group: "pulls", Default: "members",
		Meaning: "whose reviews wake a session: members (authors GitHub calls OWNER, MEMBER or COLLABORATOR of the " +
			"repository), all (anyone, on a public repository strangers too), or comma-separated logins followed " +
			"besides the members; every wake is an attempt"},

	// Connectors.
	{Name: "LOGBOOK_MCP_CONFIG", Group: "connectors", Default: "no connectors",
		Meaning: "path of the MCP servers' JSON file ({\"mcpServers\": {...}}, see docs/connectors.md): remote servers " +
			"(url, headers) called by logbook, local ones (command, args, env) run in each session's sandbox; each " +
			"offered only in its channels; ${NAME} is taken from logbook's environment (never into a local server's " +
			"command, args or env); a remote server's \"oauth\" is connected per channel by an admin on the web pages " +
			"(/mcp/<server>/connect?channel=C...), its endpoints discovered from the server when the file leaves them " +
			"out; images a tool returns reach the model as images"},
	{Name: "LOGBOOK_SECRET_KEY", Group: "connectors",
		Meaning: "32 random bytes, base64 or hex (openssl rand -base64 32): seals the MCP servers' OAuth tokens and " +
			"pending connects (AES-256-GCM); required when one has oauth"},

	// Prices and budgets.
	{Name: "LOGBOOK_PRICES", Group: "budgets", Default: "the built-in USD list prices of Anthropic's and OpenAI's models, dated 2025-11-01",
		Meaning: "model=in/out[/cache_read[/cache_write]],... per million tokens, over the built-in prices; a model " +
			"is a prefix of the names it prices (longest wins), optionally with its provider " +
			"(openai:gpt-4o=2.5/10); currency=EUR drops the built-in table. Each model call is priced from the usage " +
			"the provider reports (model_spend); one that fails part way (a broken stream, a stop, a timeout) at what " +
			"was sent and streamed, estimated where the provider did not count it"},
	{Name: "LOGBOOK_BUDGET", Group: "budgets", Default: "no budget",
		Meaning: "daily budgets in the prices' currency, per UTC day: channel=20/day (each channel, unless its " +
			"settings say otherwise), person=5/day (each person, over all channels). At 80% the thread gets one " +
			"notice; a call the rest cannot cover at its max_output_tokens does not start, and the thread says why and " +
			"who can raise it: LOGBOOK_ADMINS, with /logbook budget raise <amount> [<member ID>], for the day. 'logbook " +
			"usage' and the /usage page sum it up"},

	// Schedules and hooks.
	{Name: "LOGBOOK_SCHEDULE_MIN_INTERVAL", Group: "started", Default: "1s: any interval; @every under 1s is refused",
		Meaning: "the least time between two ticks of a schedule added with /logbook schedule add; specs are " +
			"robfig/cron's: 5 fields, 6 with seconds, @every 4s, CRON_TZ=Zone"},
	{Name: "LOGBOOK_SCHEDULE_GRACE", Group: "started", Default: "30s",
		Meaning: "how late a tick may run and still be on time; of the ticks missed while no replica ran, only the " +
			"newest runs, once, and its post says how late and why (counted in logbook_schedule_ticks_late_total and " +
			"_missed_total). A tick whose replica died is taken over after LOGBOOK_LEASE_TTL, its post found in the log"},
	{Name: "LOGBOOK_AUTOMATION_MAX_FAILURES", Group: "started", Default: "3",
		Meaning: "how many runs of a schedule or hook may fail in a row before it pauses itself, saying so in its " +
			"channel; an admin resumes it: /logbook schedule resume <id> | hook <name>"},
	{Name: "LOGBOOK_HOOKS", Group: "started", Default: "no hooks",
		Meaning: "hooks that start sessions: a JSON object, or the path of a file holding one, {\"alerts\": " +
			"{\"channel\": \"C0123ABCD\", \"secret\": \"${ALERTS_SECRET}\", \"prompt\": \"An alert fired: " +
			"{{payload}}\"}}; ${NAME} from the environment, secrets of 16+ characters. POST /hooks/<name> on " +
			"LOGBOOK_HTTP_ADDR with X-Logbook-Timestamp: <unix seconds> and X-Logbook-Signature-256: sha256=<hex " +
			"HMAC-SHA256 of timestamp + \".\" + body> (and X-Logbook-Delivery: an id) starts a session in the hook's " +
			"channel on the body; 401 for a bad signature, an unknown hook or a timestamp over 5m off, counted in " +
			"logbook_hook_refused_total, not stored"},
	{Name: "LOGBOOK_HOOK_REPLAY_WINDOW", Group: "started", Default: "24h",
		Meaning: "a delivery id, or a body with its timestamp, seen again within this starts nothing"},
	{Name: "LOGBOOK_HOOK_MAX_BODY", Group: "started", Default: "256K", Meaning: "the largest body a hook takes (413 above)"},

	// The record streamed out.
	{Name: "LOGBOOK_WEBHOOKS", Group: "streams", Default: "no webhooks",
		Meaning: "outbound webhooks: a JSON object, or the path of a file holding one, {\"oncall\": {\"url\": " +
			"\"https://…\", \"secret\": \"${ONCALL_WEBHOOK_SECRET}\", \"events\": [\"approval.requested\", " +
			"\"turn.failed\"], \"content\": false}}; ${NAME} from the environment; the secret is whsec_ + base64 of " +
			"24+ bytes; no events: every type; url https, or http to a loopback or private address. Each event is " +
			"POSTed signed per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature), ids and links " +
			"only unless content is true"},
	{Name: "LOGBOOK_WEBHOOK_MAX_AGE", Group: "streams", Default: "1h",
		Meaning: "how long a webhook may fail without a success before each event it cannot take at once becomes a " +
			"dead letter (logbook webhooks failed, logbook webhooks redeliver); until then it is retried, in order, " +
			"with backoff up to a minute"},
	{Name: "LOGBOOK_AUDIT_STREAM", Group: "streams", Default: "off",
		Meaning: "every event as it commits, in the export's JSON line with its chain position: comma-separated " +
			"destinations, stdout, a file's path (appended to), or otlp (OTLP logs over HTTP/protobuf to " +
			"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/logs, with " +
			"OTEL_EXPORTER_OTLP_HEADERS)"},

	// The HTTP address and the web pages.
	{Name: "LOGBOOK_HTTP_ADDR", Group: "web", Default: "127.0.0.1:8080, loopback only",
		Meaning: "/healthz, /readyz, /metrics and the web pages (e.g. :8080 for every interface; \"off\" for none)"},
	{Name: "LOGBOOK_WEB_TOKENS", Group: "web",
		Meaning: "web pages' bearer tokens: name:secret[:auditor],... (secrets of 16+ characters; pages are off " +
			"unless tokens or a proxy header are set)"},
	{Name: "LOGBOOK_WEB_PROXY_HEADER", Group: "web",
		Meaning: "header a trusted proxy sets to the signed-in person (oauth2-proxy: X-Forwarded-Email)"},
	{Name: "LOGBOOK_WEB_AUDITORS", Group: "web",
		Meaning: "the values of LOGBOOK_WEB_PROXY_HEADER (comma-separated) that are auditors"},
	{Name: "LOGBOOK_WEB_TRUSTED_PROXIES", Group: "web", Default: "127.0.0.0/8,::1/128: a proxy on the same host",
		Meaning: "comma-separated CIDRs whose connections may set that header; from anywhere else the header is " +
			"ignored (401). serve warns when the header is on and LOGBOOK_HTTP_ADDR is not loopback"},
	{Name: "LOGBOOK_WEB_PROXY_SECRET", Group: "web",
		Meaning: "a secret (16+ characters) the proxy sends on every request in X-Logbook-Proxy-Secret: the header is " +
			"believed only with it. Required with LOGBOOK_WEB_PROXY_HEADER where sandboxed commands share the host's " +
			"network (LOGBOOK_SANDBOX=process, LOGBOOK_SANDBOX_NETWORK=on, or a loopback address in " +
			"LOGBOOK_SANDBOX_EGRESS): there any command is a loopback caller, and without it serve refuses to start"},

	// Sign-in with OpenID Connect.
	{Name: "LOGBOOK_OIDC_ISSUER", Group: "oidc",
		Meaning: "sign people in to the web pages through your OpenID Connect provider (its issuer URL, e.g. " +
			"https://acme.okta.com or https://sso.example.com/realms/acme): authorization code with PKCE, state and " +
			"nonce checked, every sign-in (and refusal) in the access log. Needs LOGBOOK_OIDC_CLIENT_ID, " +
			"LOGBOOK_OIDC_CLIENT_SECRET and LOGBOOK_OIDC_ROLES; tokens and the proxy header keep working beside it"},
	{Name: "LOGBOOK_OIDC_CLIENT_ID", Group: "oidc", Meaning: "the client id registered with the provider"},
	{Name: "LOGBOOK_OIDC_CLIENT_SECRET", Group: "oidc", Meaning: "the client's secret"},
	{Name: "LOGBOOK_OIDC_REDIRECT_URL", Group: "oidc", Default: "LOGBOOK_PUBLIC_URL + /oidc/callback",
		Meaning: "the callback registered with the provider"},
	{Name: "LOGBOOK_OIDC_ROLES", Group: "oidc",
		Meaning: "group=role,... mapping the groups claim to roles reader and auditor (e.g. " +
			"logbook-readers=reader,security=auditor; *=reader admits everyone the provider signs in); a person in no " +
			"listed group is refused"},
	{Name: "LOGBOOK_OIDC_GROUPS_CLAIM", Group: "oidc", Default: "groups",
		Meaning: "the ID token claim with the groups (a dotted path reaches into an object, e.g. realm_access.roles); " +
			"the userinfo endpoint is asked when the ID token lacks it"},
	{Name: "LOGBOOK_OIDC_USER_CLAIM", Group: "oidc", Default: "email",
		Meaning: "the claim that names the person in the access log (an email marked unverified is refused)"},
	{Name: "LOGBOOK_OIDC_SCOPES", Group: "oidc", Default: "email profile",
		Meaning: "scopes beside openid (Okta's groups claim needs groups)"},

	// Traces and logs.
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Group: "traces", Default: "off",
		Meaning: "OpenTelemetry traces over OTLP, e.g. http://collector:4318. The SDK reads the other standard " +
			"variables itself: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the " +
			"default, grpc or http/json), _HEADERS, _TIMEOUT, _CERTIFICATE, OTEL_SERVICE_NAME (default logbook), " +
			"OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*; OTEL_SDK_DISABLED=true or " +
			"OTEL_TRACES_EXPORTER=none turn it off. Spans: each envelope, turn (its trace id in turn_started, " +
			"turn_completed and the log lines), the agent's invoke_agent, model call and tool call (GenAI conventions, " +
			"gen_ai.conversation.id the session id), Slack Web API call and database statement. The same endpoint " +
			"takes the GenAI and turn metrics (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_METRIC_EXPORT_INTERVAL, " +
			"default 60000 ms; OTEL_METRICS_EXPORTER=none turns them off): gen_ai.client.token.usage, " +
			"gen_ai.client.operation.duration, logbook.turns, logbook.turn.duration, logbook.model.cost"},
	{Name: "LOGBOOK_TRACE_CONTENT", Group: "traces", Default: "off",
		Meaning: "on | off: put prompts, completions and tools' input and output in the spans; off, spans hold no " +
			"text of a conversation"},
	{Name: "LOGBOOK_LOG_FORMAT", Group: "traces", Default: "console on a terminal, else json", Meaning: "json | console"},
	{Name: "LOGBOOK_LOG_LEVEL", Group: "traces", Default: "info", Meaning: "debug | info | warn | error"},

	// Audit inside serve.
	{Name: "LOGBOOK_AUDIT_SCHEDULE", Group: "serve-audit", Default: "no scheduled exports",
		Meaning: "cron spec of scheduled audit exports inside serve (LOGBOOK_AUDIT_* and LOGBOOK_RETENTION: see " +
			"'logbook audit --help')"},

	// logbook audit.
	{Name: "LOGBOOK_AUDIT_DATABASE_URL", Group: "audit", Default: "DATABASE_URL", Meaning: "auditor connection"},
	{Name: "LOGBOOK_AUDIT_ROLE", Group: "audit", Default: "logbook_auditor",
		Meaning: "role assumed on it (\"none\": the login's own)"},
	{Name: "LOGBOOK_AUDIT_OPERATOR", Group: "audit", Default: "USER, then the OS account; the record says which named the operator",
		Meaning: "who is acting, for the access record"},
	{Name: "LOGBOOK_AUDIT_SIGNING_KEY", Group: "audit",
		Meaning: "path of an ed25519 private key (PEM) that signs manifests and checkpoints"},
	{Name: "LOGBOOK_AUDIT_PUBLIC_KEY", Group: "audit",
		Meaning: "path of the public key that verify-export and verify --against check"},
	{Name: "LOGBOOK_AUDIT_SCHEDULE", Group: "audit",
		Meaning: "cron spec of scheduled exports (seconds optional, CRON_TZ= prefix)"},
	{Name: "LOGBOOK_AUDIT_TZ", Group: "audit", Default: "UTC",
		Meaning: "zone of the schedule and of --from/--to without an offset"},
	{Name: "LOGBOOK_AUDIT_DEST", Group: "audit", Meaning: "destination of scheduled exports: a directory or a bucket URL"},
	{Name: "LOGBOOK_AUDIT_ACTORS", Group: "audit", Default: "all",
		Meaning: "comma-separated actor ids for scheduled exports"},
	{Name: "LOGBOOK_AUDIT_PER_ACTOR", Group: "audit", Default: "off", Meaning: "on: one scheduled export per actor"},
	{Name: "LOGBOOK_AUDIT_CHANNEL", Group: "audit", Default: "all", Meaning: "one channel id for scheduled exports"},
	{Name: "LOGBOOK_AUDIT_FORMAT", Group: "audit", Default: "jsonl", Meaning: "jsonl or csv"},
	{Name: "LOGBOOK_AUDIT_SCHEDULE_NAME", Group: "audit", Default: "\"default\"", Meaning: "name of the schedule in run records"},
	{Name: "LOGBOOK_READ_DATABASE_URL", Group: "audit",
		Meaning: "a streaming standby of the auditor's primary: export and verify read it once it has replayed what " +
			"the primary had committed (else, or when it does not answer, the primary), with the same bytes"},
	{Name: "LOGBOOK_READ_MAX_WAIT", Group: "audit", Default: "2s", Meaning: "how long they wait for the standby to catch up"},
	{Name: "LOGBOOK_RETENTION", Group: "audit", Default: "off", Meaning: "how long events are kept, e.g. 400d"},
	{Name: "LOGBOOK_RETENTION_DATABASE_URL", Group: "audit", Default: "the auditor's connection",
		Meaning: "connection for purges; role logbook_retention"},
	{Name: "LOGBOOK_BLOB_URL", Group: "audit",
		Meaning: "the bucket of shared files' content, as serve has it: export --with-files reads it, and purges " +
			"delete what retention removed from it"},
}

// settingsHelp is the Environment section of `logbook <command> --help`: command's settings by
// group, each name in a column and its meaning wrapped beside it.
func settingsHelp(command string) string {
	const indent, width = 26, 100
	var b strings.Builder
	b.WriteString("Environment:\n")
	for _, g := range envGroups {
		if g.Command != command {
			continue
		}
		fmt.Fprintf(&b, "\n %s\n", g.Title)
		for _, s := range envGroupSettings(envSettings, g) {
			text := s.Meaning
			if len(s.Also) > 0 {
				text += "; also read as " + strings.Join(s.Also, ", ")
			}
			if s.Default != "" {
				text += " (default " + s.Default + ")"
			}
			lines := wrapWords(text, width-indent)
			name := "  " + s.Name
			if len(name) > indent-2 {
				b.WriteString(name + "\n")
				name = ""
			}
			for i, l := range lines {
				if i > 0 {
					name = ""
				}
				fmt.Fprintf(&b, "%-*s%s\n", indent, name, l)
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// envGroupSettings is table's settings of group g, in the table's order.
func envGroupSettings(table []envSetting, g envGroup) []envSetting {
	var out []envSetting
	for _, s := range table {
		if s.Group == g.Key {
			out = append(out, s)
		}
	}
	return out
}

// wrapWords breaks text into lines of at most width characters (a longer word has a line of
// its own).
func wrapWords(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// Markers around the part of docs/configuration.md that settingsMarkdown renders.
const (
	settingsBegin = "<!-- settings:begin: generated from cmd/logbook/envsettings.go; go test ./cmd/logbook -run TestConfigurationDocMatchesTheTable -update -->"
	settingsEnd   = "<!-- settings:end -->"
)

// settingsMarkdown is docs/configuration.md's reference, rendered from groups and table (the
// page has envGroups and envSettings): each group a section linking its
// pages, each setting a heading of its own (its anchor is the name in lower case, e.g.
// #logbook_db_pool; audit's own entry of a name serve also reads is #logbook_x-audit), its
// meaning and its default.
func settingsMarkdown(groups []envGroup, table []envSetting) string {
	var b strings.Builder
	serve := map[string]bool{}
	for _, cmd := range []string{"serve", "audit"} {
		if cmd == "serve" {
			b.WriteString("## `logbook serve` and `logbook dev`\n")
		} else {
			b.WriteString("\n## `logbook audit`\n")
		}
		for _, g := range groups {
			if g.Command != cmd {
				continue
			}
			fmt.Fprintf(&b, "\n### %s\n\nExplained in %s.\n", g.Title, g.Pages)
			for _, s := range envGroupSettings(table, g) {
				heading := "`" + s.Name + "`"
				if cmd == "audit" && serve[s.Name] {
					heading += " (audit)"
				}
				if cmd == "serve" {
					serve[s.Name] = true
				}
				fmt.Fprintf(&b, "\n#### %s\n\n", heading)
				text := markdownText(s.Meaning, table) + "."
				if len(s.Also) > 0 {
					text += " Also read as " + markdownText(strings.Join(s.Also, ", "), table) + "."
				}
				if s.Default != "" {
					text += " Default: " + markdownText(s.Default, table) + "."
				}
				b.WriteString(strings.Join(wrapWords(text, 100), "\n") + "\n")
			}
		}
	}
	return b.String()
}

// markdownText is plain text with each word Markdown would read as markup (<name>, *, _,
// ${NAME}) or that names an environment variable put in a code span, its surrounding
// punctuation left outside; a name the table has links to its heading.
func markdownText(text string, table []envSetting) string {
	words := strings.Fields(text)
	for i, w := range words {
		core := strings.TrimLeft(w, "(\"'")
		lead := w[:len(w)-len(core)]
		trimmed := strings.TrimSuffix(strings.TrimRight(core, ",.;:\"'"), "'s")
		if strings.Count(trimmed, ")") > strings.Count(trimmed, "(") {
			trimmed = strings.TrimSuffix(trimmed, ")") // the end of a parenthesis, not of OTEL_TRACES_SAMPLER(_ARG)
		}
		tail := core[len(trimmed):]
		switch {
		case slices.ContainsFunc(table, func(s envSetting) bool { return s.Name == trimmed }):
			words[i] = lead + "[`" + trimmed + "`](#" + strings.ToLower(trimmed) + ")" + tail
		case trimmed != "" && (strings.ContainsAny(trimmed, "<>*_{}$\\`") || envName.MatchString(trimmed)):
			words[i] = lead + "`" + trimmed + "`" + tail
		}
	}
	return strings.Join(words, " ")
}

// envName is an environment variable's name: DATABASE_URL, LOGBOOK_DB_POOL, OTEL_BSP_*.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9]*_[A-Z0-9_]*`)
