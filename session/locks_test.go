package session_test

import (
	"io/fs"
	"regexp"
	"strconv"
	"testing"

	"github.com/logbook/logbook/migrations"
	"github.com/logbook/logbook/session"
)

// TestAdvisoryLockKeysInSQLAreDocumented checks that every advisory-lock key written in a
// migration is one of the keys session/locks.go documents for SQL functions.
func TestAdvisoryLockKeysInSQLAreDocumented(t *testing.T) {
	t.Parallel()
	inSQL := map[int64]string{
		session.LockSessionSeed:   "per-session seed",
		session.LockRetention:     "retention and holds",
		session.LockSearchIndexer: "search indexer, taken by the purge (00005)",
		session.LockLivenessSeed:  "liveness claims (00007)",
	}
	keys := map[string]*regexp.Regexp{
		"plain":  regexp.MustCompile(`pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?\(\s*(\d+)\s*\)`),
		"seeded": regexp.MustCompile(`pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?\(\s*hashtextextended\([^,]+,\s*(\d+)\s*\)\s*\)`),
		"any":    regexp.MustCompile(`pg_(?:try_)?advisory_\w*lock\w*\(`),
	}
	found := 0
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		all := len(keys["any"].FindAllIndex(b, -1))
		known := 0
		for _, re := range []*regexp.Regexp{keys["plain"], keys["seeded"]} {
			for _, m := range re.FindAllSubmatch(b, -1) {
				known++
				k, err := strconv.ParseInt(string(m[1]), 10, 64)
				if err != nil {
					t.Errorf("%s: key %s: %v", path, m[1], err)
					continue
				}
				if _, ok := inSQL[k]; !ok {
					t.Errorf("%s: advisory-lock key %d is not documented in session/locks.go", path, k)
				}
			}
		}
		// logbook_wait_claim's key is its parameter: a liveness claim's key (LockLivenessSeed)
		// as pg_locks shows it (session.WatchPeers), not a literal.
		if path == "00160_wait_claim.sql" {
			known++
		}
		if known != all {
			t.Errorf("%s: %d advisory-lock calls, %d with a literal key this test understands", path, all, known)
		}
		found += known
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no advisory-lock keys found in the migrations")
	}
}

// TestAdvisoryLockKeysAreDistinct guards against two purposes sharing a key.
func TestAdvisoryLockKeysAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[int64]string{}
	for name, k := range map[string]int64{
		"LockSessionSeed": session.LockSessionSeed, "LockTestTemplate": session.LockTestTemplate,
		"LockRetention": session.LockRetention, "LockScheduleSeed": session.LockScheduleSeed,
		"LockSearchIndexer": session.LockSearchIndexer, "LockLivenessSeed": session.LockLivenessSeed,
		"LockScheduleTicksSeed": session.LockScheduleTicksSeed, "LockHookSeed": session.LockHookSeed,
		"LockAutomationSeed": session.LockAutomationSeed,
	} {
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share advisory-lock key %d", name, other, k)
		}
		seen[k] = name
	}
}
