package files

import (
	"encoding/json"
	"testing"

	"github.com/logbook/logbook/session"
)

// A call the log records as shared was attached: repair says so, and the model does not
// attach it again; one only uploaded (never shared) is not.
func TestAttachRecoversWhatTheLogRecords(t *testing.T) {
	t.Parallel()
	ev := func(seq int64, u session.FileUpload) session.Event {
		p, _ := json.Marshal(u)
		return session.Event{Seq: seq, Type: session.TypeFileUpload, Payload: p}
	}
	evs := []session.Event{
		ev(1, session.FileUpload{CallID: "c1", Name: "report.csv", Status: uploadUploaded}),
		ev(2, session.FileUpload{CallID: "c1", Name: "report.csv", Status: uploadShared}),
		ev(3, session.FileUpload{CallID: "c2", Name: "chart.png", Status: uploadUploaded}),
	}
	if out, ok := (attachTool{}).Recover(evs, session.ToolCall{CallID: "c1", Name: ToolAttach}); !ok || out.IsError || out.Content != "attached report.csv to the thread" {
		t.Errorf("shared: %+v %v", out, ok)
	}
	if out, ok := (attachTool{}).Recover(evs, session.ToolCall{CallID: "c2", Name: ToolAttach}); ok {
		t.Errorf("only uploaded, yet recovered as %+v", out)
	}
}
