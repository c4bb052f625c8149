// Package web serves logbook's read-only pages: a list of recent sessions with their titles,
// a transcript page (print-friendly, with downloads in text, Markdown, HTML and JSON), and a
// search page. Pages are rendered on the server with html/template; there is no front-end
// build and no script, and they read well on a laptop and on a phone.
//
// # Routes
//
//	GET /                                  recent sessions (?before=<RFC 3339> pages back)
//	GET /sessions/{id}                     transcript (?all=1 markers, ?deleted=1 auditors, ?tz=Area/City)
//	GET /sessions/{id}/download?format=md  transcript as an attachment: text, md, html or json
//	GET /sessions/{id}/files/{sha256}      a file the session holds (Config.Files; see Files)
//	GET /evals/{id}                        an eval record (a what-if) beside the turn it ran again (eval.go)
//	GET /search?q=&actor=&channel=&since=&until=
//	GET /automations?kind=&name=           the runs of schedules and hooks (Config.Runs): time,
//	                                       outcome, transcript, cost; auditors see every channel's
//	GET /channels/{channel}/settings       a channel's effective settings, their sources, its
//	                                       ledger's head and every change (Config.ChannelSettings;
//	                                       auditors only)
//	GET /signin, POST /signin              the token sign-in form for browsers (no identity needed)
//	GET /signout, POST /signout            the sign-out button, and signing out
//
// # Access
//
// The pages show workspace content, so they are closed by default: Handler refuses a
// configuration that admits nobody, and every request needs either
//
//   - a bearer token (Access.Tokens): `Authorization: Bearer <secret>`, for scripts and
//     curl; the token's name is what the access log records, never the secret; or
//   - a header set by a trusted reverse proxy (Access.ProxyHeader) naming the signed-in
//     person, for browsers.
//
// "Sign in with Slack" in front of the pages, with oauth2-proxy
// (https://oauth2-proxy.github.io/oauth2-proxy/) and its Slack OpenID Connect provider:
//
//	# Slack app: OAuth & Permissions → Redirect URL https://logbook.example.com/oauth2/callback,
//	# user scopes openid, email, profile.
//	oauth2-proxy \
//	  --provider=oidc --oidc-issuer-url=https://slack.com \
//	  --client-id=$SLACK_CLIENT_ID --client-secret=$SLACK_CLIENT_SECRET \
//	  --cookie-secret=$(openssl rand -base64 32 | head -c 32) \
//	  --email-domain=example.com \
//	  --http-address=0.0.0.0:4180 --upstream=http://127.0.0.1:8080 \
//	  --pass-user-headers
//	# logbook: LOGBOOK_HTTP_ADDR=127.0.0.1:8080, trusted header X-Forwarded-Email.
//
// Slack's OpenID Connect accepts any Slack account, not only your workspace's: restrict
// sign-in with --email-domain (or --authenticated-emails-file) to your people.
//
// The header is believed only on connections whose peer address is in Access.TrustedProxies
// (default loopback: 127.0.0.0/8, ::1/128; cmd/logbook reads LOGBOOK_WEB_TRUSTED_PROXIES);
// from any other address it is ignored, so a forged header sent straight to logbook gets
// 401. The proxy must still overwrite the header on every request (oauth2-proxy does), and
// logbook should listen where only the proxy can reach it (127.0.0.1 or a private network).
// With Access.ProxySecret the header is believed only with the proxy's secret in
// X-Logbook-Proxy-Secret too: an address does not tell the proxy from a sandboxed command on
// the same host (cmd/logbook requires the secret where sandboxes share the host's network).
//
// Browsers without a proxy sign in with a token: GET /signin (also the body of every 401)
// is a form; POST /signin with a valid token's secret opens a sign-in session
// (Config.SignIns, in PostgreSQL): the HttpOnly, SameSite=Strict cookie (Secure over HTTPS)
// holds a random id, the store only its sha256 and an HMAC tying it to the token's secret. It
// lasts 12 hours, or until POST /signout (the button on every page) ends it for every copy of
// the cookie on every replica, or until the token's secret changes.
//
// Every state-changing request (any method but GET and HEAD) must come from the pages
// themselves — Sec-Fetch-Site "same-origin", else an Origin, else a Referer, of the request's
// own host or Config.PublicURL — or it is refused 403 (no login CSRF, no forced sign-out).
// Every answer carries a Content-Security-Policy (no script, frame-ancestors 'none') and
// X-Frame-Options: DENY. Auditors are listed by that header's value (Access.Auditors);
// they also see sessions whose channel became private and may reveal deleted messages.
//
// # Private channels
//
// Private-channel content never enters the log. A session whose channel became private
// after it was logged is hidden from everyone but auditors: it is missing from the list and
// from search results, and its pages answer 404. Channel visibility comes from the caller's
// ChannelVisibility (Slack's conversations.info, is_private), asked on every request: the
// pages use the same decision as search in Slack (directory.Directory, which follows privacy
// events and answers from at most two seconds old), not a cache of their own; a channel
// whose visibility cannot be learnt counts as private.
//
// # Search and memory notes
//
// GET /search finds messages and channel memory notes ranked together (kind=all, the
// default), or one of them (kind=messages, kind=notes); a note of a channel that became
// private is hidden as its sessions are. A transcript shows, at each turn, the memory notes it
// was offered (session.Store.NotesByID reads them).
//
// # Files
//
// With Config.Files, the transcript page links each stored file shared in (or handed back to)
// the thread to GET /sessions/{id}/files/{sha256}, and shows PNG, JPEG, GIF and WebP images
// inline. The route answers only a reader who may see the session (the page's checks,
// visibility included) and only for content the session holds (session.Store.HasFile);
// anything else is 404. Content is served with X-Content-Type-Options: nosniff, a
// Content-Security-Policy of default-src 'none' (and sandbox), as an attachment under its
// recorded name; images whose bytes are what they claim are served inline; HTML, SVG, XML and
// scripts are served as application/octet-stream.
//
// # Access log
//
// Every list, view, search and download (a file's: action download, format "file:<sha256>")
// is recorded in the append-only access_log table
// (who, how identified, auditor or not, action, session, format, query, result count,
// status, client address, user agent, time) before the page is sent; if the record cannot
// be written the page is not shown (503). So are sign-ins and sign-outs (actions signin and
// signout) and every failed attempt: a wrong token (form or header), a cookie whose session
// ended, a refused cross-origin form, the proxy header from an untrusted peer or without the
// secret — as who "anonymous", via "none", format the credential tried (form, bearer, cookie,
// proxy_header), never the secret. Requests with no credential at all are answered 401 and not
// recorded. The table's columns are documented in
// migrations/00002_search.sql; audit exports include it (web_access.jsonl or .csv, listed and
// hashed in the export's manifest).
package web
