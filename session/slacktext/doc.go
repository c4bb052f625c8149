// Package slacktext decodes Slack's message markup into plain text: the one decoder that
// the gateway (when it stores a message), the brain, the transcript and search share.
//
// Slack sends text with three entities escaped (&amp; &lt; &gt;) and with control sequences
// in angle brackets: <@U123> and <@U123|name> (users), <#C1|general> (channels), <!here>,
// <!subteam^S1|@team>, <!date^…|fallback>, and links <https://x|label>, <mailto:a@b|a@b>.
// [ToPlain] decodes both, exactly once. [Markup] decodes only the control sequences, for text
// whose entities were decoded already (the readable text stored in a user_message). [Scan]
// reads one control sequence, for writers that must recognise them (the Markdown converter
// leaves them intact). The package imports nothing of logbook.
package slacktext
