package main

import (
	"bytes"
	"context"
	"flag"
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

var update = flag.Bool("update", false, "rewrite docs/configuration.md's settings from the table in envsettings.go")

// settingName is a whole LOGBOOK_* name; a name ending in "_" (LOGBOOK_AUDIT_*) is a prefix.
var settingName = regexp.MustCompile(`LOGBOOK_[A-Z0-9_]*[A-Z0-9]`)

// tableFile holds the settings table: its literals are what the table names, not what the
// loader reads, so the scan of the loader leaves it out.
const tableFile = "envsettings.go"

// loaderLiterals is every string literal of the Go files under dirs (from the test files too
// when tests is set, never from the table's file) that exact matches whole: e.getenv("LOGBOOK_X"),
// a table's {"LOGBOOK_X", ...}.
func loaderLiterals(t *testing.T, exact *regexp.Regexp, tests bool, dirs ...string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if (strings.HasSuffix(f, "_test.go") && !tests) || filepath.Base(f) == tableFile {
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

// loaderSettings is every LOGBOOK_* setting the Go files under dirs read.
func loaderSettings(t *testing.T, tests bool, dirs ...string) map[string]bool {
	t.Helper()
	return loaderLiterals(t, regexp.MustCompile(`^LOGBOOK_[A-Z0-9_]*[A-Z0-9]$`), tests, dirs...)
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

// settingsDrift compares the table with what the loader reads: the LOGBOOK_* names read but
// not in the table (by name or as another's Also), and the table's names nobody reads (read
// holds every name the loader has as a literal, LOGBOOK_* or not).
func settingsDrift(table []envSetting, read map[string]bool) (unlisted, unread []string) {
	listed := map[string]bool{}
	for _, s := range table {
		for _, name := range append([]string{s.Name}, s.Also...) {
			listed[name] = true
			if !read[name] && !slices.Contains(unread, name) {
				unread = append(unread, name)
			}
		}
	}
	for name := range read {
		if settingName.MatchString(name) && !listed[name] {
			unlisted = append(unlisted, name)
		}
	}
	slices.Sort(unlisted)
	slices.Sort(unread)
	return unlisted, unread
}

// tableErrors is what is wrong with the table itself: a group nobody declared, a group with
// no settings, a name twice for one command, an empty meaning, a meaning ending in a period
// (the renderers add their own).
func tableErrors(groups []envGroup, table []envSetting) []string {
	var errs []string
	byKey := map[string]envGroup{}
	for _, g := range groups {
		byKey[g.Key] = g
	}
	used, seen := map[string]bool{}, map[string]bool{}
	for _, s := range table {
		g, ok := byKey[s.Group]
		if !ok {
			errs = append(errs, s.Name+": group "+strconv.Quote(s.Group)+" is not in envGroups")
		}
		used[s.Group] = true
		if seen[g.Command+" "+s.Name] {
			errs = append(errs, s.Name+": twice for "+g.Command)
		}
		seen[g.Command+" "+s.Name] = true
		if strings.TrimSpace(s.Meaning) == "" || strings.HasSuffix(s.Meaning, ".") {
			errs = append(errs, s.Name+": a meaning, without a final period, is required")
		}
	}
	for _, g := range groups {
		if !used[g.Key] {
			errs = append(errs, "group "+g.Key+" has no settings")
		}
	}
	return errs
}

// The settings table in envsettings.go never drifts from what the binary reads: every
// LOGBOOK_* setting read by cmd/logbook is in it, and every name in it (standard ones like
// DATABASE_URL too) is read. serve --help and audit --help print the table's sections, and no
// page of the docs names a setting nobody reads (the docs may name the tests' own knobs).
func TestSettingsTablesMatchTheLoader(t *testing.T) {
	t.Parallel()
	read := loaderSettings(t, false, ".")
	if len(read) < 40 || !read["LOGBOOK_SANDBOX"] || !read["LOGBOOK_AUDIT_DATABASE_URL"] {
		t.Fatalf("the loader scan found %d settings: %v", len(read), read) // the scan itself works
	}
	literals := loaderLiterals(t, regexp.MustCompile(`^[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]$`), false, ".")
	unlisted, unread := settingsDrift(envSettings, literals)
	if len(unlisted) > 0 {
		t.Errorf("read by cmd/logbook but not in the settings table (envSettings in cmd/logbook/%s): %v", tableFile, unlisted)
	}
	if len(unread) > 0 {
		t.Errorf("in the settings table (cmd/logbook/%s) but read by no code of cmd/logbook: %v", tableFile, unread)
	}
	for _, e := range tableErrors(envGroups, envSettings) {
		t.Errorf("the settings table: %s", e)
	}
	for _, cmd := range []string{"serve", "audit"} {
		if help := helpText(t, cmd, "--help"); !strings.Contains(help, settingsHelp(cmd)) {
			t.Errorf("%s --help does not print the table's settings:\n%s", cmd, help)
		}
	}
	knobs := loaderSettings(t, true, ".", "../../migrations/pgtest", "../../session/search/searchbench")
	for name := range read {
		knobs[name] = true
	}
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range unknownSettings(string(doc), knobs) {
			t.Errorf("%s names %s, which neither cmd/logbook nor the tests read", strings.TrimPrefix(file, "../../"), name)
		}
	}
}

// A setting the loader reads and the table lacks, a name in the table nobody reads, and a
// broken table are each found (so the test above cannot pass by finding nothing).
func TestSettingsDriftIsFound(t *testing.T) {
	t.Parallel()
	table := []envSetting{{Name: "LOGBOOK_A", Meaning: "a", Group: "g"}, {Name: "LOGBOOK_B", Also: []string{"LOGBOOK_B2"}, Meaning: "b", Group: "g"}}
	read := map[string]bool{"LOGBOOK_A": true, "LOGBOOK_B": true, "LOGBOOK_NEW": true, "HOME_DIR": true}
	unlisted, unread := settingsDrift(table, read)
	if !slices.Equal(unlisted, []string{"LOGBOOK_NEW"}) || !slices.Equal(unread, []string{"LOGBOOK_B2"}) {
		t.Errorf("settingsDrift = unlisted %v, unread %v; want [LOGBOOK_NEW], [LOGBOOK_B2]", unlisted, unread)
	}
	errs := tableErrors([]envGroup{{Key: "g", Command: "serve"}, {Key: "empty", Command: "serve"}},
		append(table, envSetting{Name: "LOGBOOK_A", Meaning: "again.", Group: "g"}, envSetting{Name: "LOGBOOK_C", Meaning: "c", Group: "nope"}))
	want := []string{"LOGBOOK_A: twice for serve", "LOGBOOK_A: a meaning, without a final period, is required",
		`LOGBOOK_C: group "nope" is not in envGroups`, "group empty has no settings"}
	if !slices.Equal(errs, want) {
		t.Errorf("tableErrors = %q, want %q", errs, want)
	}
}

// configurationDoc is doc with the part between the settings markers rendered anew from
// groups and table.
func configurationDoc(doc string, groups []envGroup, table []envSetting) (string, bool) {
	head, rest, ok := strings.Cut(doc, settingsBegin)
	_, tail, ok2 := strings.Cut(rest, settingsEnd)
	if !ok || !ok2 {
		return "", false
	}
	return head + settingsBegin + "\n\n" + settingsMarkdown(groups, table) + "\n" + settingsEnd + tail, true
}

// docs/configuration.md's reference is the table's rendering: a table edited without the page
// regenerated (or the page edited by hand) fails here, saying how to regenerate it. Every
// setting has a heading of its own, so other pages link to #logbook_x.
func TestConfigurationDocMatchesTheTable(t *testing.T) {
	t.Parallel()
	const path = "../../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := configurationDoc(string(b), envGroups, envSettings)
	if !ok {
		t.Fatalf("docs/configuration.md lacks the markers %q and %q around its settings", settingsBegin, settingsEnd)
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		b = []byte(want)
	}
	if string(b) != want {
		t.Errorf("docs/configuration.md differs from the settings table in cmd/logbook/%s (%s); regenerate it: "+
			"go test ./cmd/logbook -run TestConfigurationDocMatchesTheTable -update", tableFile, firstDifference(string(b), want))
	}
	slugs := headingSlugs(want)
	for _, s := range envSettings {
		if !slugs[strings.ToLower(s.Name)] {
			t.Errorf("docs/configuration.md has no heading whose anchor is #%s", strings.ToLower(s.Name))
		}
	}
	// A table edit shows in the page: the check above is not blind to the table.
	table := slices.Clone(envSettings)
	table[0].Meaning += " (edited)"
	if edited, _ := configurationDoc(string(b), envGroups, table); edited == want {
		t.Error("an edit of the table does not change the rendered page")
	}
}

// firstDifference names the first line where got and want part.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ": has " + strconv.Quote(gl) + ", the table renders " + strconv.Quote(wl)
		}
	}
	return "no line differs"
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
