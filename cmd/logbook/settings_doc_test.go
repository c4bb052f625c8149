package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// settingName is a whole LOGBOOK_* name; a name ending in "_" (LOGBOOK_AUDIT_*) is a prefix.
var settingName = regexp.MustCompile(`LOGBOOK_[A-Z0-9_]*[A-Z0-9]`)

// loaderSettings is every LOGBOOK_* setting Go files under dirs read: each string literal that
// is exactly a setting's name (e.getenv("LOGBOOK_X"), a table's {"LOGBOOK_X", ...}), from the
// test files too when tests is set.
func loaderSettings(t *testing.T, tests bool, dirs ...string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	exact := regexp.MustCompile(`^LOGBOOK_[A-Z0-9_]*[A-Z0-9]$`)
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") && !tests {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && exact.MatchString(s) {
						names[s] = true
					}
				}
				return true
			})
		}
	}
	return names
}

// helpText is what `logbook ARGS` prints.
func helpText(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("logbook %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// The settings tables (serve --help's, audit --help's) and the docs (README.md and docs/*.md)
// never drift from what the binary reads: every LOGBOOK_* setting read by cmd/logbook is named
// in one of the tables and in docs/configuration.md's index; every setting the tables or the
// docs name is read by it (the docs may also name the tests' own knobs, read by test code).
func TestSettingsTablesMatchTheLoader(t *testing.T) {
	t.Parallel()
	read := loaderSettings(t, false, ".")
	if len(read) < 40 || !read["LOGBOOK_SANDBOX"] || !read["LOGBOOK_AUDIT_DATABASE_URL"] {
		t.Fatalf("the loader scan found %d settings: %v", len(read), read) // the scan itself works
	}
	tables := map[string]string{"serve --help": helpText(t, "serve", "--help"), "audit --help": helpText(t, "audit", "--help")}
	var missing []string
	for name := range read {
		// Named in a table: an entry of its own, or in a neighbour's (LOGBOOK_MAX_CONTINUATIONS
		// under LOGBOOK_MAX_OUTPUT_TOKENS).
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(tables["serve --help"] + tables["audit --help"]) {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("read by cmd/logbook but named in neither serve --help nor audit --help: %v", missing)
	}
	for table, text := range tables {
		for _, name := range unknownSettings(text, read) {
			t.Errorf("%s names %s, which cmd/logbook does not read", table, name)
		}
	}
	knobs := loaderSettings(t, true, ".", "../../migrations/pgtest")
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range unknownSettings(string(doc), knobs) {
			t.Errorf("%s names %s, which neither cmd/logbook nor the tests read", strings.TrimPrefix(file, "../../"), name)
		}
	}
	index, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var unindexed []string
	for name := range read {
		if !bytes.Contains(index, []byte("`"+name+"`")) {
			unindexed = append(unindexed, name)
		}
	}
	slices.Sort(unindexed)
	if len(unindexed) > 0 {
		t.Errorf("read by cmd/logbook but not in docs/configuration.md's index: %v", unindexed)
	}
}

// unknownSettings is the LOGBOOK_* names in text that known lacks, sorted, each once.
func unknownSettings(text string, known map[string]bool) []string {
	var out []string
	for _, loc := range settingName.FindAllStringIndex(text, -1) {
		name := text[loc[0]:loc[1]]
		if loc[1] < len(text) && text[loc[1]] == '_' {
			continue // a prefix: LOGBOOK_AUDIT_*
		}
		if !known[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
