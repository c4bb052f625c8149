package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// README's Layout names every package of the module, and names none that is not one: a
// package added without a line there, or a line left behind by a package that moved, fails.
func TestREADMELayout(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "github.com/logbook/logbook/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, "github.com/logbook/logbook/"))
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := layoutPackages(t, string(readme))
	for _, p := range pkgs {
		if !slices.Contains(named, p) {
			t.Errorf("README's Layout does not name package %s", p)
		}
	}
	for _, p := range named {
		if !slices.Contains(pkgs, p) {
			t.Errorf("README's Layout names %s, which is no package", p)
		}
	}
}

// layoutPackages is every `path` README's Layout table names that reads as a package path (a
// top-level folder of the module, then path elements), in either column.
func layoutPackages(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	pkgPath := regexp.MustCompile("`((?:audit|bot|cmd|migrations|sandbox|session)(?:/[a-z0-9]+)*)`")
	var named []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range pkgPath.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(named, m[1]) {
				named = append(named, m[1])
			}
		}
	}
	if len(named) == 0 {
		t.Fatal("README's Layout table names no package")
	}
	return named
}
