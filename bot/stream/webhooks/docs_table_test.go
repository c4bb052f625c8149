package webhooks

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/logbook/logbook/session"
)

var backticked = regexp.MustCompile("`([^`]+)`")

func ticks(s string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// docs/streams.md's event table names every webhook type once, with the payload fields a
// delivery of it carries (idFields), and its example delivery has the ids every delivery has.
func TestDocsEventTableMatchesTheCode(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "streams.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	_, table, ok := strings.Cut(page, "| webhook type | from the log |")
	if !ok {
		t.Fatal("docs/streams.md has no event table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	logTypes := map[string][]session.Type{TurnCompleted: {session.TypeTurnCompleted}, TurnFailed: {session.TypeTurnCompleted}}
	for lt, wt := range byLogType {
		logTypes[wt] = append(logTypes[wt], lt)
	}
	documented := map[string]bool{}
	for _, row := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("a row of the event table without three cells: %s", row)
		}
		fieldsCell, _, _ := strings.Cut(cells[2], "(") // what follows "(" is prose
		got := ticks(fieldsCell)
		slices.Sort(got)
		for _, typ := range ticks(cells[0]) {
			if documented[typ] {
				t.Errorf("%s is in the table twice", typ)
			}
			documented[typ] = true
			var want []string
			for _, lt := range logTypes[typ] {
				want = append(want, idFields[lt]...)
			}
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(got, want) {
				t.Errorf("the table gives %s the fields %v; a delivery carries %v", typ, got, want)
			}
		}
	}
	for _, typ := range Types {
		if !documented[typ] {
			t.Errorf("the event table has no row for %s", typ)
		}
	}
	if len(documented) != len(Types) {
		t.Errorf("the table has %d types, the code %d", len(documented), len(Types))
	}

	// The example delivery: the same keys as a real body of its type.
	_, ex, _ := strings.Cut(page, "\n### A delivery\n")
	_, ex, _ = strings.Cut(ex, "```json\n")
	ex, _, _ = strings.Cut(ex, "```\n")
	var doc struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(ex), &doc); err != nil {
		t.Fatalf("the example delivery is not JSON: %v\n%s", err, ex)
	}
	payload, _ := json.Marshal(session.ApprovalRequested{Turn: 2, CallID: "toolu_01", Tool: "run_command", Summary: "s",
		Channel: "C0123ABCD", ExpiresAt: time.Now()})
	e := session.Event{SessionID: uuid.New(), Seq: 3, ID: uuid.New(), Type: session.TypeApprovalRequested,
		Actor: session.Actor{Kind: session.ActorBot, ID: "B0123"}, CreatedAt: time.Now(), Payload: payload, Hash: make([]byte, 32)}
	typ, _ := TypeOf(e)
	body, err := Body(Webhook{Name: "x"}, typ, e, Place{Channel: "C0123ABCD", ThreadTS: "1765062600.000100"}, "https://logbook.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var real struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &real); err != nil {
		t.Fatal(err)
	}
	if doc.Type != real.Type || !slices.Equal(slices.Sorted(maps.Keys(doc.Data)), slices.Sorted(maps.Keys(real.Data))) {
		t.Errorf("the example delivery (%s) has the data keys %v; a real one (%s) has %v", doc.Type,
			slices.Sorted(maps.Keys(doc.Data)), real.Type, slices.Sorted(maps.Keys(real.Data)))
	}
}
