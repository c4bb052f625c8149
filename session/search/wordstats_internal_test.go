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
// index is the cheaper, but dearer than indexBudget: the walk goes on, cut at its end, where
// the index took 113 / 158 ms. A rare word in the same channel still takes the index, and so
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
		{`"deploy error"`, []string{"deploy", "error"}, 0, 0.019, true, false}, // by one person: no match yet, 1.9 % with both words
		{"kerberos", []string{"kerbero"}, 0, 0, false, false},
		{`"kerberos zeppelin"`, []string{"kerbero", "zeppelin"}, 0, 0, false, false},
	} {
		n := float64(c.found)
		pLow, pHigh := max(n, 0.5)/walked, (n+2)/window
		walkOn := scatteredRowCost * (30 - n) / pLow
		gin := indexCost(scatteredGinCost, max(c.pAnd, pHigh), w.postings(c.words, true), docs)
		old := indexCost(scatteredGinCost, max(c.pAnd, pHigh), 0, docs)
		if got := !takesIndex(walkOn, gin, false); got != c.walk {
			t.Errorf("%s, %d found: walk %v (walking on %.0f, the index %.0f), want %v", c.name, c.found, got, walkOn, gin, c.walk)
		}
		if got := walkOn <= old; got != c.walkOld {
			t.Errorf("%s, %d found, priced by its matches: walk %v, want %v", c.name, c.found, got, c.walkOld)
		}
	}
	if got := (&wordStats{}).postings([]string{"deploy"}, true); got != 0 {
		t.Errorf("no statistics: %v, want 0 (the index priced by its matches)", got)
	}
}

// Over the whole table the index reads every message holding all the words, and the newest
// messages can hold them far more seldom than the table does (issue 53, ten million events:
// "postgres replication" in 1 of 2,000 of the newest, 1 in 176 of all). Priced by the walk's
// share alone the index looked cheap and read 25,000 heap pages (130 ms); with the product of
// the words' shares it is dearer than walking on. A word the statistics do not list leaves
// the estimate to the walk (0), and so does a query that is not all required words.
func TestIndexCostOverTheTableTakesTheWordsTogether(t *testing.T) {
	const docs = 4_400_000
	w := &wordStats{share: map[string]float64{"postgr": 0.0954, "replic": 0.0465, "bill": 0.059, "invoic": 0.059, "payment": 0.056}, minimum: 0.0429}
	if got := w.together([]string{"postgr", "replic"}); got < 0.0044 || got > 0.0045 {
		t.Errorf("together(postgr, replic) = %v, want 0.0954 × 0.0465", got)
	}
	if got := w.together([]string{"postgr", "kerbero"}); got != 0 {
		t.Errorf("together with an unlisted word = %v, want 0", got)
	}
	if got := (&wordStats{}).together([]string{"postgr"}); got != 0 {
		t.Errorf("together without statistics = %v, want 0", got)
	}
	// After 4,000 rows with 2 matches: walking on to 30 matches is 56,000 rows.
	walkOn := 28.0 / (2.0 / 4000)
	pHigh := 4.0 / 4000
	words := []string{"postgr", "replic"}
	bySample := indexCost(ginRowCost, pHigh, w.postings(words, true), docs)
	withWords := indexCost(ginRowCost, max(pHigh, w.together(words)), w.postings(words, true), docs)
	if takesIndex(walkOn, withWords, false) {
		t.Errorf("postgres replication: takes the index (walking on %.0f, the index %.0f)", walkOn, withWords)
	}
	if withWords <= bySample {
		t.Errorf("the words' product did not raise the index's price: %.0f ≤ %.0f", withWords, bySample)
	}
	// Three words in 6 % of messages each: their posting lists alone are dearer than the
	// budget, whatever the walk has seen: the walk goes on, cut at MaxWalk.
	three := []string{"bill", "invoic", "payment"}
	gin := indexCost(ginRowCost, max(2.0/16000, w.together(three)), w.postings(three, true), docs)
	if takesIndex(1e9, gin, false) {
		t.Errorf("billing invoice payment: takes the index at %.0f, over the budget %d", gin, indexBudget)
	}
	// A page after another takes the cheaper plan, budget or not.
	if !takesIndex(1e9, gin, true) {
		t.Errorf("billing invoice payment, a page after another: walks on (the index %.0f, walking on 1e9)", gin)
	}
	for in, want := range map[string]bool{
		`'postgr' & 'replic'`:                true,
		`'deploy' <-> 'error'`:               true,
		`'redi' | 'memcach'`:                 false,
		`'deploy' & !'stage'`:                false,
		`'o''brien' & 'a|b'`:                 true,
		`( 'deploy' <-> 'error' ) & 'kerbe'`: true,
	} {
		if got := allRequired(in); got != want {
			t.Errorf("allRequired(%q) = %v, want %v", in, got, want)
		}
	}
}
