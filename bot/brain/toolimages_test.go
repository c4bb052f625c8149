package brain_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain"
	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/bot/connectors"
	"github.com/logbook/logbook/session"
	"github.com/logbook/logbook/session/filestore"
	"github.com/logbook/logbook/session/transcript"
)

// everythingHTTP runs the reference MCP server (@modelcontextprotocol/server-everything from
// npm, installed by .ci/run: LOGBOOK_TEST_MCP_EVERYTHING) over streamable HTTP and returns its
// endpoint.
func everythingHTTP(t *testing.T) string {
	t.Helper()
	entry := os.Getenv("LOGBOOK_TEST_MCP_EVERYTHING")
	set := entry != ""
	if !set {
		entry = "/var/cache/logbook/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
	}
	if _, err := os.Stat(entry); err != nil {
		if set {
			t.Fatalf("LOGBOOK_TEST_MCP_EVERYTHING=%s: %v", entry, err)
		}
		t.Skipf("the reference MCP server is not installed (%v); .ci/run installs it", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("node", entry, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(listening)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-drained
		_ = cmd.Wait()
	})
	select {
	case <-listening:
	case <-drained:
		t.Fatal("the reference server exited before it listened")
	case <-time.After(time.Minute):
		t.Fatal("the reference server did not listen within a minute")
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// The image an MCP tool returns (the reference server's get-tiny-image) reaches the model as
// an image: inside the tool_result for Anthropic, in the user message after the tool message
// for OpenAI (whose tool messages take no image). The log's tool_result names it by hash and
// the file store holds its bytes once; the transcript says "image (png, …)", never base64.
func TestMCPImageReachesTheModel(t *testing.T) {
	t.Parallel()
	url := everythingHTTP(t)
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.titled()
			first, _ := e.user("show me the MCP logo")
			turn := e.startTurn(first)
			var fake *fakeprovider.Server
			var p brain.Provider
			if kind == "anthropic" {
				fake = fakeprovider.NewAnthropic(t, anthropicKey)
				p = anthropicProvider(t, fake, anthropicKey)
			} else {
				fake = fakeprovider.NewOpenAI(t, anthropicKey)
				p = openAIProvider(t, fake, anthropicKey)
			}
			fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_img1", Name: "mcp__everything__get-tiny-image", Input: `{}`}}},
				fakeprovider.Reply{Text: "That is the MCP logo."})
			b, _ := newBrain(t, p, nil)
			cfg, err := connectors.Parse("mcp.json", []byte(`{"mcpServers": {"everything": {"url": "`+url+`", "channels": ["C0000001"]}}}`), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			conns := connectors.New(cfg, connectors.Options{ConnectTimeout: time.Minute}).Session("C0000001", "general", nil, zerolog.Nop())
			defer conns.Close()
			store := filestore.NewStore(e.st)
			tr := e.turn(nil, turn)
			tr.Toolsets, tr.Files, tr.Keep = []brain.Toolset{connectors.Toolset(conns)}, store, store
			if _, err := b.Run(context.Background(), tr); err != nil {
				t.Fatal(err)
			}
			calls := mustAllValid(t, fake, 2)
			var shown []fakeprovider.Block
			var resultText string
			for _, m := range calls[1].Messages {
				for _, bl := range m.Blocks {
					switch {
					case bl.Type == "tool_result":
						resultText = bl.Text
						shown = append(shown, bl.Media...)
					case bl.Type == "image" && m.Role == "user":
						shown = append(shown, bl)
					}
				}
			}
			if len(shown) != 1 || shown[0].MediaType != "image/png" || !bytes.HasPrefix(shown[0].Data, []byte("\x89PNG")) {
				t.Fatalf("images the model got: %d %+v", len(shown), shown)
			}
			if !strings.Contains(resultText, "Here's the image you requested") || strings.Contains(resultText, "iVBOR") {
				t.Errorf("the result's text: %q", resultText)
			}
			var res session.ToolResult
			var raw []byte
			var evs []session.Event
			evs = e.after(0)
			for _, ev := range evs {
				if ev.Type == session.TypeToolResult {
					res = decode[session.ToolResult](t, ev)
					raw = ev.Payload
				}
			}
			if len(res.Images) != 1 || res.Images[0].SHA256 != session.FileHash(shown[0].Data) || res.Images[0].MediaType != "image/png" ||
				res.Images[0].Size != int64(len(shown[0].Data)) || res.Server != "everything" {
				t.Fatalf("tool_result = %+v", res)
			}
			if bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(shown[0].Data)[:40])) || len(raw) > 1024 {
				t.Errorf("the payload holds the image itself (%d bytes): %s", len(raw), raw)
			}
			got, err := store.FileContent(context.Background(), res.Images[0].SHA256)
			if err != nil || !bytes.Equal(got, shown[0].Data) {
				t.Errorf("the file store has %d bytes (%v)", len(got), err)
			}
			var out strings.Builder
			if err := transcript.Render(&out, e.sess, evs, transcript.Options{}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "image (png, ") || strings.Contains(out.String(), "iVBOR") {
				t.Errorf("transcript:\n%s", out.String())
			}
		})
	}
}

// Images a model API does not take (not PNG, JPEG, GIF or WebP by their content), and every
// image where the turn keeps no files, stay a line with their type and size; so does audio.
func TestMCPImageNotShownIsNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	first, _ := e.user("show me")
	turn := e.startTurn(first)
	fake := fakeprovider.NewAnthropic(t, anthropicKey)
	fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "mcp__inc__lookup", Input: `{}`}}},
		fakeprovider.Reply{Text: "done"})
	b, _ := newBrain(t, anthropicProvider(t, fake, anthropicKey), nil)
	tr := e.turn(nil, turn)
	tr.Toolsets = []brain.Toolset{connectors.Toolset(&imageConnectors{images: []connectors.Image{{MIMEType: "image/bmp", Data: []byte("BM not a png")}}})}
	if _, err := b.Run(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 2)
	last := calls[1].Messages[len(calls[1].Messages)-1]
	if len(last.Blocks) == 0 || last.Blocks[0].Type != "tool_result" || len(last.Blocks[0].Media) != 0 ||
		!strings.Contains(last.Blocks[0].Text, "[image image/bmp, 12 B, not shown: not an image type the model takes") {
		t.Errorf("the result the model got: %+v", last.Blocks)
	}
}

type imageConnectors struct{ images []connectors.Image }

func (f *imageConnectors) Tools(context.Context) []connectors.Tool {
	return []connectors.Tool{{Name: "mcp__inc__lookup", Server: "inc", Tool: "lookup", Schema: map[string]any{"type": "object"}}}
}

func (f *imageConnectors) Call(context.Context, string, json.RawMessage) connectors.Result {
	return connectors.Result{Content: "a picture", Images: f.images}
}

// An OpenAI-compatible server not known to take images (LOGBOOK_MODEL_VISION unset) gets
// the tool's image named in the tool message, and no image anywhere; the log keeps it, so a
// model given images later sees it.
func TestMCPImageToATextOnlyModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.titled()
	first, _ := e.user("show me")
	turn := e.startTurn(first)
	fake := fakeprovider.NewOpenAI(t, openAIKey)
	fake.Push(fakeprovider.Reply{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "mcp__inc__lookup", Input: `{}`}}},
		fakeprovider.Reply{Text: "done"})
	p, err := brain.NewProvider("openai:llama-test", brain.ProviderConfig{OpenAIAPIKey: openAIKey, OpenAIBaseURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newBrain(t, p, nil)
	store := filestore.NewStore(e.st)
	tr := e.turn(nil, turn)
	tr.Toolsets, tr.Files, tr.Keep = []brain.Toolset{connectors.Toolset(&imageConnectors{images: []connectors.Image{{MIMEType: "image/png", Data: testPNG(t)}}})}, store, store
	if _, err := b.Run(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	calls := mustAllValid(t, fake, 2)
	var tool string
	for _, m := range calls[1].Messages {
		for _, bl := range m.Blocks {
			if bl.Type == "image" {
				t.Errorf("a text-only model got an image in a %s message", m.Role)
			}
			if bl.Type == "tool_result" {
				tool = bl.Text
			}
		}
	}
	if !strings.Contains(tool, "a picture") || !strings.Contains(tool, "[the tool returned image (png, ") || !strings.Contains(tool, "LOGBOOK_MODEL_VISION") {
		t.Errorf("tool message: %q", tool)
	}
	for _, ev := range e.after(turn) {
		if ev.Type == session.TypeToolResult {
			if r := decode[session.ToolResult](t, ev); len(r.Images) != 1 {
				t.Errorf("tool_result = %+v, want its image kept", r)
			}
		}
	}
}
