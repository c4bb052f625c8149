package transcript

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"io"
	"regexp"
	"strings"
)

// CSS styles a transcript fragment (and the page around it): readable on a laptop and a
// phone, and on paper (navigation hidden, no backgrounds, code wrapped).
const CSS template.CSS = `
:root { --fg: #1d1c1d; --muted: #616061; --line: #e2e2e2; --code: #f6f6f6; --accent: #1264a3; --mark: #fff0a8; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: #fff; }
main { max-width: 52rem; margin: 0 auto; padding: 1rem; }
a { color: var(--accent); }
h1 { font-size: 1.5rem; line-height: 1.25; margin: .5rem 0; overflow-wrap: anywhere; }
.meta { color: var(--muted); font-size: .875rem; margin: 0 0 1rem; overflow-wrap: anywhere; }
.entry { border-top: 1px solid var(--line); padding: .6rem 0; break-inside: avoid; }
.entry header { display: flex; flex-wrap: wrap; gap: .5rem; align-items: baseline; }
.author { font-weight: 700; }
.time { color: var(--muted); font-size: .8rem; }
.text p { margin: .25rem 0; white-space: pre-wrap; overflow-wrap: anywhere; }
pre { background: var(--code); padding: .5rem .75rem; border-radius: 4px; overflow-x: auto; font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; margin: .35rem 0; }
.assistant .author { color: #2e7d32; }
.unposted { opacity: .7; border-left-style: dashed; }
.tool { font-size: .9rem; }
.tool .status { color: var(--muted); }
.tool .status.error { color: #b00020; }
.marker { color: var(--muted); font-size: .8rem; padding: .25rem 0; }
.edited, .deleted { color: var(--muted); font-style: italic; }
.notes { list-style: none; padding: 0; margin: .35rem 0; color: var(--fg); font-size: .9rem; }
.note { margin: .2rem 0; overflow-wrap: anywhere; }
.note .label { color: var(--muted); }
.files { list-style: none; padding: 0; margin: .35rem 0; font-size: .9rem; }
.file { margin: .2rem 0; overflow-wrap: anywhere; }
.file .status { color: var(--muted); }
.file.missing .status { color: #b00020; }
.file-image { display: block; max-width: 100%; max-height: 24rem; margin: .35rem 0; border: 1px solid var(--line); }
.auditor { border-left: 3px solid #b00020; padding-left: .5rem; color: #5a0010; }
mark { background: var(--mark); color: inherit; padding: 0 .1em; }
nav { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; padding: .6rem 1rem; border-bottom: 1px solid var(--line); }
nav form { flex: 1 1 16rem; display: flex; gap: .5rem; }
nav input[type=search] { flex: 1; min-width: 0; padding: .4rem; font-size: 1rem; }
@media (max-width: 40rem) { body { font-size: 15px; } main { padding: .6rem; } pre { font-size: 12px; } }
@media print {
  nav, .noprint { display: none !important; }
  body { font-size: 11pt; }
  main { max-width: none; padding: 0; }
  pre { white-space: pre-wrap; overflow-wrap: anywhere; background: none; border: 1px solid #ccc; }
  a { color: inherit; text-decoration: none; }
}
`

var urlPattern = regexp.MustCompile(`https?://[^\s<>"'\x60]+[^\s<>"'\x60.,;:!?)\]]`)

// linkify escapes s for HTML and makes its http(s) URLs links.
func linkify(s string) template.HTML {
	var b strings.Builder
	last := 0
	for _, m := range urlPattern.FindAllStringIndex(s, -1) {
		b.WriteString(html.EscapeString(s[last:m[0]]))
		u := html.EscapeString(s[m[0]:m[1]])
		fmt.Fprintf(&b, `<a href="%s" rel="noopener noreferrer nofollow">%s</a>`, u, u)
		last = m[1]
	}
	b.WriteString(html.EscapeString(s[last:]))
	return template.HTML(b.String())
}

var fragmentTmpl = template.Must(template.New("transcript").Funcs(template.FuncMap{
	"blocks":  Blocks,
	"linkify": linkify,
	"status":  toolStatus,
}).Parse(`{{define "text"}}{{range blocks .}}{{if .Code}}<pre><code{{with .Lang}} class="language-{{.}}"{{end}}>{{.Text}}</code></pre>{{else}}<p>{{linkify .Text}}</p>{{end}}{{end}}{{end -}}
<article class="transcript" data-session="{{.SessionID}}">
<h1>{{.Heading}}</h1>
<p class="meta">Session <code>{{.SessionID}}</code> · #{{.ChannelLabel}} · thread {{.ThreadTS}}{{if .Permalink}} · <a href="{{.Permalink}}">Open in Slack</a>{{end}}</p>
{{- with .ForkOf}}
<p class="meta fork">Forked from {{.}}</p>
{{- end}}{{range .Forks}}
<p class="meta fork">Forked into {{.}}</p>
{{- end}}{{with .EvalOf}}
<p class="meta fork">What-if of {{.}}</p>
{{- end}}{{- range .Entries}}
{{- if eq .Kind "marker"}}
<div class="entry marker" id="e{{.Seq}}" data-seq="{{.Seq}}"><span class="time">{{.TimeText}}</span> · {{.Marker}}
{{- with .Notes}}
<ul class="notes">
{{- range .}}
<li class="note{{with .Status}} {{.}}{{end}}" data-note="{{.ID}}">🧠 <span class="label">{{.Label}}</span>{{with .Text}}<div class="text">{{template "text" .}}</div>{{end}}
{{- with .ForgottenText}}<div class="auditor"><p>Auditor view: the forgotten note said</p>{{template "text" .}}</div>{{end}}</li>
{{- end}}
</ul>
{{- end}}</div>
{{- else if eq .Kind "tool"}}
<section class="entry tool" id="e{{.Seq}}" data-seq="{{.Seq}}">
<header><span class="author">🔧 {{.Tool.Name}}</span><time class="time" datetime="{{.Time.Format "2006-01-02T15:04:05Z07:00"}}">{{.TimeText}}</time></header>
{{- with .Tool}}{{if .Input}}<pre class="input"><code>{{.Input}}</code></pre>{{if .HiddenInputs}}<p class="status">… {{.HiddenInputs}} more input lines</p>{{end}}{{end}}
<p class="status{{if .IsError}} error{{end}}">→ {{status .}}</p>
{{- if .Output}}<pre class="output"><code>{{.Output}}</code></pre>{{end}}{{if .HiddenLines}}<p class="status">… {{.HiddenLines}} more lines</p>{{end}}
{{- range .Images}}{{if and .URL .Image}}<a href="{{.URL}}"><img class="file-image" src="{{.URL}}" alt="{{.Name}}" loading="lazy"></a>{{end}}{{end}}{{end}}
</section>
{{- else}}
<section class="entry {{.Kind}}{{if .Unposted}} unposted{{end}}" id="e{{.Seq}}" data-seq="{{.Seq}}">
<header><span class="author">{{.Author}}</span>{{if .Unposted}} <span class="status">(not posted to Slack)</span>{{end}}<time class="time" datetime="{{.Time.Format "2006-01-02T15:04:05Z07:00"}}">{{.TimeText}}</time></header>
<div class="text">
{{- if .Deleted}}<p class="deleted">[message deleted]</p>{{with .DeletedText}}<div class="auditor"><p>Auditor view: the deleted message said</p>{{template "text" .}}</div>{{end}}
{{- else}}{{template "text" .Text}}{{if .Edited}}<p class="edited">(edited)</p>{{end}}{{end -}}
</div>
{{- with .Files}}
<ul class="files">
{{- range .}}
<li class="file{{if not .Stored}} missing{{end}}"{{with .SHA256}} data-sha256="{{.}}"{{end}}>📎 {{if .URL}}<a class="name" href="{{.URL}}">{{.Name}}</a>{{else}}<span class="name">{{.Name}}</span>{{end}} <span class="status">({{or .Mimetype "unknown type"}}, {{.SizeText}}){{with .StatusText}} — {{.}}{{else}} · sha256 <code title="{{.SHA256}}">{{.ShortSHA}}</code>{{end}}</span>
{{- if and .URL .Image}}<a href="{{.URL}}"><img class="file-image" src="{{.URL}}" alt="{{.Name}}" loading="lazy"></a>{{end}}</li>
{{- end}}
</ul>
{{- end}}
</section>
{{- end}}
{{- end}}
</article>
`))

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>{{.CSS}}</style>
</head>
<body>
<main>
{{.Body}}
</main>
</body>
</html>
`))

// HTMLFragment renders t as an <article> to place inside a page styled with CSS.
func (t *Transcript) HTMLFragment() (template.HTML, error) {
	var b bytes.Buffer
	if err := fragmentTmpl.Execute(&b, t); err != nil {
		return "", fmt.Errorf("render transcript %s as HTML: %w", t.SessionID, err)
	}
	return template.HTML(b.String()), nil
}

// writeHTML writes a standalone, print-friendly HTML document.
func (t *Transcript) writeHTML(w io.Writer) error {
	body, err := t.HTMLFragment()
	if err != nil {
		return err
	}
	return pageTmpl.Execute(w, struct {
		Title string
		CSS   template.CSS
		Body  template.HTML
	}{t.Heading(), CSS, body})
}
