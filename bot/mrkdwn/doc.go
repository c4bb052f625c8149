// Package mrkdwn converts text between the model and Slack: pure functions,
// no I/O, safe for concurrent use.
//
// # Outbound: FromMarkdown, EscapeText, Split, Join
//
// FromMarkdown turns the Markdown a model writes into Slack mrkdwn, parsing
// it with goldmark (CommonMark plus GFM strikethrough and tables; raw HTML is
// not recognised, so "<div>" is literal text):
//
//	**b** __b__          → *b*
//	*x*                  → *x*   (Slack bold; see "Idempotence")
//	_i_                  → _i_
//	~~s~~ ~s~            → ~s~
//	[text](url)          → <url|text>   (<url> when text is empty or the url;
//	                                     just text for a relative url)
//	![alt](url)          → <url|alt>
//	<https://x> <a@b.co> → <https://x> <mailto:a@b.co|a@b.co>
//	# Heading            → *Heading*
//	- item / 1. item     → "• item" / "1. item" (start number and '.'/')'
//	                       kept); nested lists indented four NBSPs per level
//	> quote              → "> " on every line
//	`code`               → unchanged but for escaping (backtick runs kept)
//	```lang … ```        → ``` … ```: content kept but for escaping, language
//	                       tag dropped (Slack would show it as a first line);
//	                       indented and ~~~ blocks become ``` blocks too
//	tables               → columns padded with spaces inside a ``` block
//	--- (rule)           → ──────────
//	- [x] / - [ ]        → • ☑ / • ☐
//	text[^n] + [^n]: def → text[1], and "[1] def" lines at the end
//
// Line endings "\r\n" and a lone "\r" count as "\n" (as in CommonMark) and
// come out as "\n". Blocks are separated by one newline, or a blank line where the source had
// one (and always after a quote, before a table and before footnotes); the
// result has no trailing newline. Blocks inside list items are not indented
// (a code block in an item starts at column 0), because Markdown would strip
// or reinterpret the indentation on a second pass; only nested lists are
// indented, and their code block lines are not. An item whose first block is
// a code block or a table puts its marker on a line of its own ("•" then the
// fence), since a fence after "• " is not a fence. Formatting Slack cannot
// nest (bold in bold, bold in a heading) is flattened. Slack formats *b*,
// _i_ and ~s~ only at word boundaries, so markers that touch a letter or
// digit (or another marker) get a zero-width space (U+200B) between:
// "he**l**lo" → "he\u200b*l*\u200blo", "これは**太字**です" likewise; so
// does a "\" that ends a line, which a second pass would read as a hard
// break.
//
// Escaping: in literal text only & < > are escaped (&amp; &lt; &gt;), so
// "We've" stays "We've". A character reference in the Markdown is decoded
// first (&copy; → ©, &amp; stays &amp;), except one for Markdown punctuation
// (&#42;), which is kept as text. Backslash escapes (\*) are kept as written,
// backslash included: Slack has no escape syntax, and dropping the backslash
// would let a second pass read "*" as markup. Slack parses & < > inside
// code too ("`map<K,V>`" would lose "<K,V>", "`<@U1>`" would mention), so
// code spans, code blocks and table cells are escaped as well; there an
// "&amp;", "&lt;" or "&gt;" the model wrote is taken as already escaped
// (kept, so a second pass changes nothing), which means code that spells
// those entities literally shows their characters instead.
//
// Slack tokens the model writes are kept exactly: <#C…|name>,
// <!date^…|…>, <url|label>, <mailto:…> (mentions are made inert, below). Bare http(s) URLs are kept as
// written (with & escaped), so "__init__" in a URL never turns bold. Both
// are cut out before parsing and put back afterwards.
//
// # Mentions
//
// Model output is untrusted, so it can never ping a whole channel or group.
// A broadcast token (<!here>, <!channel>, <!everyone>, <!group>,
// <!subteam^S1|@ops>: every "<!…>" but a date) becomes inert text, "@" and
// a zero-width space (U+200B) before the word, label or id: "@​here",
// "@​ops". The text "@here", "@channel" and "@everyone" (any case, a
// whole word) gets the same zero-width space wherever it appears, code and
// tables included, so it reads the same but pings no one even if the
// message is posted with link_names. In code a broadcast token shows
// escaped, as written. Nor can it ping one person: a user mention <@U…>
// (or <@W…|label>) becomes "@" and a zero-width space before the id or
// label — the model may echo a mention from text an outsider wrote (a
// review, a CI log, a message it was shown). Inert does the same to
// streamed text. FromMarkdownMentioning keeps user mentions live, for text
// logbook writes itself (a canned reply naming who should look), never for
// the model's.
//
// # Idempotence
//
// FromMarkdown(FromMarkdown(x)) == FromMarkdown(x) for every x. Slack's bold
// "*b*" is CommonMark emphasis, so the converter reads single-star emphasis
// as Slack bold: "*b*" stays "*b*" on every pass. The price is that a model's
// "*italic*" shows as bold; "_italic_" stays italic. Everything the
// converter emits re-parses to itself: bullets are "•" (not a Markdown list
// marker), nesting uses NBSPs (which Markdown does not strip), rules are
// box-drawing characters, and "&amp;"/"&lt;"/"&gt;" decode and re-escape to
// themselves. As a safety net FromMarkdown converts its own output again (at
// most four passes in all) and returns the first fixpoint; for ordinary text
// the second pass confirms the first. The fuzz test FuzzFromMarkdown checks
// the property on generated input.
//
// Split cuts long text into parts of at most DefaultLimit (3,900) runes for
// separate messages, at paragraph, line, word, then rune boundaries, closing
// a ``` block at the end of a part and reopening it at the start of the next
// (on a line of its own, even after a cut inside a long code line). It does
// not cut inside an entity, a <…> token or a code span, and closes and
// reopens a bold, italic or strike pair it has to cut; Join undoes exactly
// that. EscapeText escapes user-derived fragments.
//
// # Inbound: StripBotMention, BlocksText, AttachmentsText
//
// Slack-formatted text from an event is decoded into plain text for the
// model, the transcript and search by session/slacktext's ToPlain, which
// callers use directly (&amp; → &, <@U1> → @name, <url|label> →
// "label (url)"). StripBotMention removes the bot's own mention first and
// may return "" (the caller must not send an empty turn). BlocksText and
// AttachmentsText flatten rich_text blocks and legacy attachments for
// messages whose text field is empty. The raw event keeps the escaped form;
// these functions only produce derived text.
package mrkdwn
