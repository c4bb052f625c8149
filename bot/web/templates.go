package web

import "html/template"

const pageCSS template.CSS = `
.brand { font-weight: 700; text-decoration: none; color: var(--fg); }
.who { color: var(--muted); font-size: .8rem; }
ul.sessions, ol.hits { list-style: none; padding: 0; margin: 0; }
ul.sessions li, ol.hits li { border-top: 1px solid var(--line); padding: .6rem 0; }
.sessions a.title, .hits a.title { font-weight: 600; font-size: 1.05rem; overflow-wrap: anywhere; }
.snippet { margin: .25rem 0; overflow-wrap: anywhere; }
.filters { display: flex; flex-wrap: wrap; gap: .5rem; margin: .5rem 0 1rem; }
.filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
.filters input { font-size: 1rem; padding: .3rem; }
.notice { background: #fff8e1; border: 1px solid #f0d98c; padding: .6rem .8rem; border-radius: 4px; }
.actions { display: flex; flex-wrap: wrap; gap: .75rem; font-size: .875rem; margin: .5rem 0; }
.empty { color: var(--muted); }
button { font-size: 1rem; padding: .35rem .8rem; }
nav form.signout { flex: 0 0 auto; }
figure.chart { margin: 1rem 0; max-width: 640px; }
figure.chart svg { display: block; width: 100%; height: auto; }
figure.chart figcaption { color: var(--muted); font-size: .875rem; }
table.usage { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.usage th, table.usage td { padding: .3rem .6rem; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
table.usage th[scope=row] { text-align: left; overflow-wrap: anywhere; white-space: normal; }
table.usage thead th { font-size: .8rem; color: var(--muted); vertical-align: bottom; }
@media (max-width: 640px) {
  table.usage thead { display: none; }
  table.usage, table.usage tbody, table.usage tr { display: block; }
  table.usage tr { border-top: 1px solid var(--line); padding: .4rem 0; }
  table.usage th[scope=row] { display: block; border: 0; padding: .2rem 0; }
  table.usage td { display: flex; justify-content: space-between; border: 0; padding: .1rem 0; }
  table.usage td::before { content: attr(data-label); color: var(--muted); margin-right: 1rem; }
  table.usage td.empty::before { content: none; }
}
.eval { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
.eval pre { white-space: pre-wrap; overflow-wrap: anywhere; }
@media (max-width: 40rem) { .eval { grid-template-columns: 1fr; } }
`

const pageTemplates = `
{{define "head"}}<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{.Title}} · logbook</title>
{{with .Refresh}}<meta http-equiv="refresh" content="{{.}}">{{end}}
<style>{{css}}</style>
</head>
<body>
<nav>
<a class="brand" href="/">logbook</a>
<a href="/">Recent</a>
<form action="/search" method="get" role="search"><input type="search" name="q" value="{{.Q}}" placeholder="Search conversations" aria-label="Search conversations"><button type="submit">Search</button></form>
{{with .Who}}<span class="who">{{.}}</span>{{end}}
{{if .SignOut}}<form action="/signout" method="post" class="signout"><button type="submit">Sign out</button></form>{{end}}
</nav>
<main>
{{end}}

{{define "foot"}}
</main>
</body>
</html>
{{end}}

{{define "message"}}{{template "head" .}}
<h1>{{.Title}}</h1>
<p class="notice">{{.Message}}</p>
{{template "foot" .}}{{end}}

{{define "signin"}}{{template "head" .}}
<h1>{{.Title}}</h1>
<p class="notice">{{.Message}}</p>
{{if .TokenForm}}<form action="/signin" method="post" class="filters" id="signin">
<label>Access token (from your logbook operator)<input type="password" name="token" autocomplete="current-password" required></label>
<label>&nbsp;<button type="submit">Sign in</button></label>
</form>
{{with .Problem}}<p class="notice" role="alert">{{.}}</p>{{end}}
<p class="empty">You stay signed in in this browser for 12 hours, or until you sign out (the button at the top of every page). The browser keeps a sign-in id, never the token.</p>{{end}}
{{with .OIDCLogin}}<p><a href="{{.}}" id="oidc-signin">Sign in with your organisation's account</a></p>{{end}}
{{template "foot" .}}{{end}}

{{define "signedin"}}{{template "head" .}}
<h1>{{.Title}}</h1>
<p class="notice">{{.Message}}</p>
<p><a href="{{.Next}}" id="continue">Continue</a></p>
{{template "foot" .}}{{end}}

{{define "signout"}}{{template "head" .}}
<h1>Sign out</h1>
<form action="/signout" method="post" id="signout"><button type="submit">Sign out</button></form>
{{template "foot" .}}{{end}}

{{define "list"}}{{template "head" .}}
<h1>Recent sessions</h1>
{{if .Sessions}}<ul class="sessions">
{{range .Sessions}}<li data-session="{{.SessionID}}">
<a class="title" href="/sessions/{{.SessionID}}">{{.Heading}}</a>
<div class="meta">#{{.ChannelName}} · {{.Messages}} messages · last activity {{.When}}{{with .Permalink}} · <a href="{{.}}">Slack</a>{{end}}</div>
</li>
{{end}}</ul>
{{with .Next}}<p><a href="{{.}}">Older sessions</a></p>{{end}}
{{else}}<p class="empty">No sessions yet.</p>{{end}}
{{template "foot" .}}{{end}}

{{define "transcript"}}{{template "head" .}}
<div class="actions noprint">
{{if .All}}<a href="/sessions/{{.Session}}{{.With "all" ""}}">Conversation only</a>{{else}}<a href="/sessions/{{.Session}}{{.With "all" "1"}}">Show everything</a>{{end}}
{{if .Auditor}}{{if .Revealed}}<a href="/sessions/{{.Session}}{{.With "deleted" ""}}">Hide deleted text</a>{{else}}<a href="/sessions/{{.Session}}{{.With "deleted" "1"}}">Reveal deleted text (auditor)</a>{{end}}{{end}}
<span>Download:</span>
<a href="/sessions/{{.Session}}/download{{.With "format" "text"}}">text</a>
<a href="/sessions/{{.Session}}/download{{.With "format" "md"}}">Markdown</a>
<a href="/sessions/{{.Session}}/download{{.With "format" "html"}}">HTML</a>
<a href="/sessions/{{.Session}}/download{{.With "format" "json"}}">JSON</a>
</div>
{{.Transcript}}
{{template "foot" .}}{{end}}

{{define "search"}}{{template "head" .}}
<h1>Search</h1>
<form action="/search" method="get" class="filters">
<label>Words, "phrases", -exclude, OR<input type="search" name="q" value="{{.Q}}" autofocus></label>
<label>Person<input name="actor" value="{{.Actor}}" placeholder="name, U… or bot"></label>
<label>Channel<input name="channel" value="{{.Channel}}" placeholder="C…"></label>
<label>Since<input type="date" name="since" value="{{.Since}}"></label>
<label>Until<input type="date" name="until" value="{{.Until}}"></label>
<label>Kind<select name="kind">{{range .Kinds}}<option value="{{.Value}}"{{if .Selected}} selected{{end}}>{{.Label}}</option>{{end}}</select></label>
<label>&nbsp;<button type="submit">Search</button></label>
</form>
{{with .Message}}<p class="notice" role="status">{{.}}</p>{{end}}
{{if and .Searched (not .Message)}}
{{if .Hits}}<ol class="hits">
{{range .Hits}}{{if .NoteID}}<li class="hit note" data-note="{{.NoteID}}">
<span class="title">Memory note {{.NoteID}}</span>{{if .FromSession}} · <a href="/sessions/{{.SessionID}}">{{if .Title}}{{.Title}}{{else}}Thread {{.ThreadTS}}{{end}}</a>{{end}}
<p class="snippet">{{.Snippet}}</p>
<div class="meta">added by {{.Who}} · #{{.ChannelName}} · {{.When}}{{with .Permalink}} · <a href="{{.}}">Open in Slack</a>{{end}}</div>
</li>
{{else}}<li class="hit" data-session="{{.SessionID}}">
<a class="title" href="/sessions/{{.SessionID}}#e{{.Seq}}">{{if .Title}}{{.Title}}{{else}}Thread {{.ThreadTS}}{{end}}</a>
<p class="snippet">{{.Snippet}}</p>
<div class="meta">{{.Who}} · #{{.ChannelName}} · {{.When}}{{if .Edited}} · edited{{end}}{{with .Permalink}} · <a href="{{.}}">Open in Slack</a>{{end}} · session <code>{{.SessionID}}</code></div>
</li>
{{end}}{{end}}</ol>
{{else if not .More}}<p class="empty">{{if eq .Kind "notes"}}No notes match{{else if eq .Kind "messages"}}No messages match{{else}}Nothing matches{{end}} “{{.Q}}”.</p>{{end}}
{{with .More}}<p><a href="{{.}}" id="more">More results</a> <span class="meta">(this search stopped early: older messages are on the next page)</span></p>{{end}}
{{end}}
{{template "foot" .}}{{end}}
`
