package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// hostileGitConfig makes the sandbox's repository run a marker command from each of the
// places git takes commands from on `git add` and `git diff`: core.fsmonitor, a clean filter
// driver a .gitattributes names, a textconv driver, and a post-index-change hook (in
// core.hooksPath and in .git/hooks). Each command creates a file in marks/.
func hostileGitConfig(marks string) string {
	return fmt.Sprintf(`set -e
mkdir -p %[1]s hooks
cat >> .git/config <<'CFG'
[core]
	fsmonitor = "mkdir -p %[1]s; touch %[1]s/fsmonitor; false"
	hooksPath = hooks
[filter "evil"]
	clean = "mkdir -p %[1]s; touch %[1]s/filter; cat"
	smudge = "mkdir -p %[1]s; touch %[1]s/smudge; cat"
[diff "evil"]
	textconv = "mkdir -p %[1]s; touch %[1]s/textconv; cat"
CFG
printf '* filter=evil diff=evil\n' > .gitattributes
printf '#!/bin/sh\nmkdir -p %[1]s; touch %[1]s/hook\n' > hooks/post-index-change
cp hooks/post-index-change .git/hooks/post-index-change
chmod +x hooks/post-index-change .git/hooks/post-index-change
`, marks)
}

func markers(tb testing.TB, s *sandbox) []string {
	tb.Helper()
	entries, err := os.ReadDir(filepath.Join(s.workspace, "marks"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// A repository whose .git/config, hooks and .gitattributes an (approved) command made hostile
// runs nothing when logbook saves and restores its work — though the same configuration does
// run its commands on a plain `git add -A` (checked first, so the test cannot pass vacuously).
func TestSaveWorkRunsNoCommandOfTheRepository(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
			p, _ := mustProvider(t, kind, nil)
			recipe := Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}}
			ctx := context.Background()
			sb := mustProvision(t, p, "hostile", recipe)
			s := sb.(*sandbox)
			marks := s.inside + "/marks"
			if res := mustExec(t, sb, ExecRequest{Shell: hostileGitConfig(marks)}); res.ExitCode != 0 {
				t.Fatalf("set up the hostile config: %+v", res)
			}
			// The control: the repository's own git runs every marker.
			ctl := mustExec(t, sb, ExecRequest{Shell: sandboxGit + "echo x >> README; GIT_INDEX_FILE=.git/ctl.index git add -A; GIT_INDEX_FILE=.git/ctl.index git diff --cached HEAD >/dev/null; rm -f .git/ctl.index; git checkout -q README"})
			if got := strings.Join(markers(t, s), " "); got != "filter fsmonitor hook smudge textconv" {
				t.Fatalf("the hostile config ran %q on a plain git add, diff and checkout, want all five (%+v)", got, ctl)
			}
			mustExec(t, sb, ExecRequest{Shell: "rm -rf marks"})

			if err := sb.WriteFile(ctx, "new.txt", []byte("new\n")); err != nil {
				t.Fatal(err)
			}
			if err := sb.WriteFile(ctx, "README", []byte("hello\nchanged\n")); err != nil {
				t.Fatal(err)
			}
			mustExec(t, sb, ExecRequest{Shell: sandboxGit + "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m local"})
			w, id, err := SaveWork(ctx, sb, Commit(sb), WorkID{})
			if err != nil || len(w.Patch) == 0 || len(w.Bundle) == 0 {
				t.Fatalf("SaveWork = %+v (patch %d bytes, bundle %d), %v", id, len(w.Patch), len(w.Bundle), err)
			}
			if !strings.Contains(string(w.Patch), "+changed") || !strings.Contains(string(w.Patch), "new.txt") {
				t.Fatalf("the patch misses the work:\n%s", w.Patch)
			}
			if got := markers(t, s); len(got) != 0 {
				t.Fatalf("saving the work ran the repository's commands: %v", got)
			}
			// Unchanged, then changed again: still nothing runs.
			if _, again, err := SaveWork(ctx, sb, Commit(sb), id); err != nil || again != id {
				t.Fatalf("SaveWork unchanged = %+v, %v", again, err)
			}
			if err := sb.WriteFile(ctx, "README", []byte("hello\nagain\n")); err != nil {
				t.Fatal(err)
			}
			if _, _, err := SaveWork(ctx, sb, Commit(sb), id); err != nil {
				t.Fatal(err)
			}
			if got := markers(t, s); len(got) != 0 {
				t.Fatalf("saving the work ran the repository's commands: %v", got)
			}

			// Restoring into a sandbox whose repository a recipe step made hostile runs
			// nothing either (checkout and apply would run hooks, smudge filters): the patch brings the
			// .gitattributes and hooks back.
			fresh := mustProvision(t, p, "hostile2", Recipe{Repo: recipe.Repo})
			fs := fresh.(*sandbox)
			mustExec(t, fresh, ExecRequest{Shell: hostileGitConfig(fs.inside+"/marks") + "rm -rf .gitattributes hooks\n"})
			if err := RestoreWork(ctx, fresh, w); err != nil {
				t.Fatal(err)
			}
			if got, err := fresh.ReadFile(ctx, "README"); err != nil || string(got) != "hello\nchanged\n" {
				t.Fatalf("restored README = %q, %v", got, err)
			}
			if got := markers(t, fs); len(got) != 0 {
				t.Fatalf("restoring the work ran the repository's commands: %v", got)
			}
		})
	}
}

// The file tools never write into a git directory, however the path gets there.
func TestWriteFileRefusesGitDirectories(t *testing.T) {
	t.Parallel()
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			gs := newGitServer(t, map[string][]byte{"README": []byte("hello\n")})
			p, _ := mustProvider(t, kind, nil)
			sb := mustProvision(t, p, "guard", Recipe{Repo: &RepoSpec{URL: gs.URL, Branch: "main", Header: gs.Header}})
			ctx := context.Background()
			s := sb.(*sandbox)
			if res := mustExec(t, sb, ExecRequest{Shell: `set -e
ln -s .git lnk
ln -s .git/config cfg
ln -s .git/hooks/pre-commit dangling
mkdir -p sub/.git bare/objects other/hooks wt
touch bare/HEAD other/HEAD
mkdir other/objects
cd wt && printf 'gitdir: ../other\n' > .git.file
`}); res.ExitCode != 0 {
				t.Fatalf("setup: %+v", res)
			}
			before, err := os.ReadFile(filepath.Join(s.workspace, ".git", "config"))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{".git/config", ".GIT/config", ".git/hooks/pre-commit", "x/../.git/hooks/post-checkout", ".git",
				"lnk/config", "lnk/hooks/new/x", "cfg", "dangling", "sub/.git/config", "bare/config", "bare/hooks/pre-commit",
				s.inside + "/.git/config"} {
				if err := sb.WriteFile(ctx, name, []byte("[core]\n\tfsmonitor = evil\n")); !errors.Is(err, ErrGitDir) {
					t.Errorf("WriteFile(%q) = %v, want ErrGitDir", name, err)
				}
			}
			after, err := os.ReadFile(filepath.Join(s.workspace, ".git", "config"))
			if err != nil || string(after) != string(before) {
				t.Fatalf(".git/config changed: %q, %v", after, err)
			}
			for _, name := range []string{".git/hooks/pre-commit", ".git/hooks/post-checkout", ".git/hooks/new"} {
				if _, err := os.Lstat(filepath.Join(s.workspace, name)); err == nil {
					t.Errorf("%s was created", name)
				}
			}
			// A work tree whose .git is a file naming another directory: that directory is
			// protected too.
			mustExec(t, sb, ExecRequest{Shell: "mv .git real.git && printf 'gitdir: other\\n' > .git"})
			if err := sb.WriteFile(ctx, "other/config", []byte("x")); !errors.Is(err, ErrGitDir) {
				t.Errorf("WriteFile(other/config) with .git naming other = %v, want ErrGitDir", err)
			}
			if err := sb.WriteFile(ctx, "real.git/config", []byte("x")); !errors.Is(err, ErrGitDir) {
				t.Errorf("WriteFile(real.git/config), a directory git takes for a repository = %v, want ErrGitDir", err)
			}
			// Ordinary files, also through a link to an ordinary directory, are written.
			mustExec(t, sb, ExecRequest{Shell: "ln -s sub/deep lnk2 && mkdir -p sub/deep"})
			for _, name := range []string{"README", "src/new.go", "lnk2/f.txt", ".gitignore", "git/config", "wt/.git.file"} {
				if err := sb.WriteFile(ctx, name, []byte("ok\n")); err != nil {
					t.Errorf("WriteFile(%q) = %v", name, err)
				}
			}
			if got, err := os.ReadFile(filepath.Join(s.workspace, "sub", "deep", "f.txt")); err != nil || string(got) != "ok\n" {
				t.Errorf("through lnk2: %q, %v", got, err)
			}
		})
	}
}
