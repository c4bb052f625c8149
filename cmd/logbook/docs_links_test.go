package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docFiles is README.md and every page of docs/, as paths from this package's directory.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	return append([]string{"../../README.md"}, pages...)
}

// mdLink is an inline Markdown link's target: ](target) or ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// urlScheme starts a target that is no path in the repository (https:, mailto:, ...).
var urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// inlineCode is a `code span`: links inside one are text, not links.
var inlineCode = regexp.MustCompile("`[^`\n]*`")

// proseLines is text's lines outside fenced code blocks (``` or ~~~, indented or not).
func proseLines(text string) []string {
	var out []string
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		out = append(out, line)
	}
	return out
}

// headingSlugs is the anchors GitHub gives text's headings: each heading's slug, and slug-N
// for the Nth repeat of one.
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	for _, line := range proseLines(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		if n := seen[slug]; n > 0 {
			slugs[slug+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[slug] = true
		}
		seen[slug]++
	}
	return slugs
}

// githubSlug is the anchor GitHub makes of a heading: lower case, every character but
// letters, marks, digits, connector punctuation (_), spaces and hyphens dropped, spaces made
// hyphens.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link of README.md and docs/*.md leads somewhere: the file exists, and an
// anchor names a heading of the page it points into (GitHub's slug of it). A page renamed,
// or a heading reworded, without its links following fails here.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	found := map[string]bool{} // "file -> target", to check the scan itself
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../../")
		for _, line := range proseLines(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if urlScheme.MatchString(target) {
					continue
				}
				found[file+" -> "+target] = true
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				info, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s: link %s: %s does not exist", name, target, path)
					continue
				}
				if anchor == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: link %s: an anchor into %s, which is no Markdown page", name, target, path)
					continue
				}
				page, err := os.ReadFile(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !headingSlugs(string(page))[anchor] {
					t.Errorf("%s: link %s: %s has no heading whose anchor is #%s", name, target, strings.TrimPrefix(dest, "../../"), anchor)
				}
			}
		}
	}
	if !found["../../README.md -> docs/deploy.md"] {
		t.Errorf("the scan did not find README's link to docs/deploy.md (found %d links): the scan itself is broken", len(found))
	}
}

// The slug rules on headings these docs have.
func TestGitHubSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Try it in `logbook dev`":                              "try-it-in-logbook-dev",
		"A hostile sender of hooks (POST /hooks/<name>)":       "a-hostile-sender-of-hooks-post-hooksname",
		"1. Create the Slack app from the manifest":            "1-create-the-slack-app-from-the-manifest",
		"Egress: the only way out":                             "egress-the-only-way-out",
		"The channel's repository":                             "the-channels-repository",
		"Sign in with your identity provider (OpenID Connect)": "sign-in-with-your-identity-provider-openid-connect",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
}
