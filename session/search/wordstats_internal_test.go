package search

import (
	"slices"
	"testing"
)

func TestLexemesOfATsquery(t *testing.T) {
	for in, want := range map[string][]string{
		`'deploy' <-> 'error'`:                 {"deploy", "error"},
		`'deploy' & !'stage'`:                  {"deploy", "stage"},
		`'redi' | 'memcach' | 'redi'`:          {"redi", "memcach"},
		`'o''brien' <-> 'deploy'`:              {"o'brien", "deploy"},
		`( 'deploy' <-> 'error' ) & 'kerbero'`: {"deploy", "error", "kerbero"},
		``:                                     nil,
	} {
		if got := lexemes(in); !slices.Equal(got, want) {
			t.Errorf("lexemes(%q) = %q, want %q", in, got, want)
		}
	}
}

// Issue 53, at ten million events: "deploy error" in one channel found 1 match in the
// channel's newest 1,000 messages, 1.7 % of which hold both words. Priced by that share
// alone, the index (1.5 × 1.7 % of 4.4 million messages) looked cheaper than walking on to
// 30 matches, and took 129 / 255 ms reading the words' posting lists (deploy in 17 % of the
// messages, error in 21 %); priced with them, the walk goes on (and is cut, with More). With
// no match at all in the window (by one person) walking on is priced at 480,000 rows and the
// index still wins, narrowly. A rare word in the same channel still takes the index, and so
// does a phrase of two rare words.
func TestIndexCostCountsThePostingLists(t *testing.T) {
	const docs = 4_400_000
	w := &wordStats{share: map[string]float64{"deploy": 0.171, "error": 0.2113, "postgr": 0.0963}, minimum: 0.0429}
	walked, window := 1000.0, 1000.0
	for _, c := range []struct {
		name    string
		words   []string
		found   int     // matches in the window
		pAnd    float64 // share of the window holding all the words
		walk    bool    // the plan walks on
		walkOld bool    // it did, priced by the matches alone
	}{
		{`"deploy error"`, []string{"deploy", "error"}, 1, 0.017, true, false},
		{`"deploy error"`, []string{"deploy", "error"}, 0, 0.019, false, false}, // by one person: no match yet, 1.9 % with both words
		{"kerberos", []string{"kerbero"}, 0, 0, false, false},
		{`"kerberos zeppelin"`, []string{"kerbero", "zeppelin"}, 0, 0, false, false},
	} {
		n := float64(c.found)
		pLow, pHigh := max(n, 0.5)/walked, (n+2)/window
		walkOn := scatteredRowCost * (30 - n) / pLow
		gin := indexCost(scatteredGinCost, max(c.pAnd, pHigh), w.postings(c.words), docs)
		old := indexCost(scatteredGinCost, max(c.pAnd, pHigh), 0, docs)
		if got := walkOn <= gin; got != c.walk {
			t.Errorf("%s, %d found: walk %v (walking on %.0f, the index %.0f), want %v", c.name, c.found, got, walkOn, gin, c.walk)
		}
		if got := walkOn <= old; got != c.walkOld {
			t.Errorf("%s, %d found, priced by its matches: walk %v, want %v", c.name, c.found, got, c.walkOld)
		}
	}
	if got := (&wordStats{}).postings([]string{"deploy"}); got != 0 {
		t.Errorf("no statistics: %v, want 0 (the index priced by its matches)", got)
	}
}
