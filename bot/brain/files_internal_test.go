package brain

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/logbook/logbook/bot/brain/fakeprovider"
	"github.com/logbook/logbook/session"
)

// mapFiles is a FileReader over a map, counting reads.
type mapFiles struct {
	data  map[string][]byte
	reads int
}

func (m *mapFiles) FileContent(ctx context.Context, sha string) ([]byte, error) {
	m.reads++
	if d, ok := m.data[sha]; ok {
		return d, nil
	}
	return nil, errors.New("no such content")
}

type testFile struct {
	name, mimetype string
	data           []byte
}

// share adds, for the message with ts, a file_ref and a stored file_fetched per file, and
// puts the content into files.
func (es *events) share(files *mapFiles, ts string, fs ...testFile) {
	for i, f := range fs {
		id := fmt.Sprintf("F%s_%d", ts, i)
		es.add(session.TypeFileRef, session.FileRef{FileID: id, Name: f.name, Mimetype: f.mimetype, Size: int64(len(f.data)), TS: ts, User: "U1"})
	}
	for i, f := range fs {
		id := fmt.Sprintf("F%s_%d", ts, i)
		sha := session.FileHash(f.data)
		files.data[sha] = f.data
		es.add(session.TypeFileFetched, session.FileFetched{FileID: id, TS: ts, Name: f.name, Mimetype: f.mimetype,
			Size: int64(len(f.data)), SHA256: sha, Status: session.FileStored})
	}
}

func buildWithFiles(t *testing.T, es events, files *mapFiles) history {
	t.Helper()
	c := newFileCache(files)
	c.load(t.Context(), es, zerolog.Nop())
	return mustBuild(t, es, historyOptions{Files: c})
}

func pngOf(t testing.TB, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// textFile is n bytes of lines, opening with FIRST and ending with LAST.
func textFile(tag string, n int) []byte {
	body := strings.Repeat(tag+" line of text\n", n/(len(tag)+14)+1)
	return []byte("FIRST " + body[:n-len("FIRST ")-len("LAST\n")] + "LAST\n")
}

// One text file shows at most 32 KiB, head and tail, with a line saying what was cut; all
// text files of a request show at most 96 KiB, the newest first, and an older one that no
// longer fits is named with why.
func TestFileTextBudgets(t *testing.T) {
	t.Parallel()
	files := &mapFiles{data: map[string][]byte{}}
	var es events
	es.user("1.1", "look at this")
	big := textFile("big", 100<<10)
	es.share(files, "1.1", testFile{"big.log", "text/plain", big})
	h := buildWithFiles(t, es, files)
	if len(h.Messages) != 1 || len(h.Messages[0].Blocks) != 2 {
		t.Fatalf("history = %s", shape(h.Messages))
	}
	text := h.Messages[0].Blocks[1].Text
	if !strings.HasPrefix(text, "[File big.log (text/plain, 100.0 KB) shared by Alice]\n```\nFIRST big line") ||
		!strings.Contains(text, "LAST\n```\n[The file has 102400 bytes; ") ||
		!strings.Contains(text, "bytes from its middle are left out above") || !strings.Contains(text, "bytes of the file left out here …]") {
		t.Errorf("cut file block:\n%s…%s", text[:200], text[len(text)-400:])
	}
	if len(text) > maxFileText+500 || len(text) < maxFileText-100 {
		t.Errorf("cut file block is %d bytes, want about %d", len(text), maxFileText)
	}

	// Four 40 KiB files, one per message: the newest three fill the request's 96 KiB.
	files = &mapFiles{data: map[string][]byte{}}
	es = nil
	for i := range 4 {
		ts := fmt.Sprintf("2.%d", i)
		es.user(ts, fmt.Sprintf("file %d", i))
		es.share(files, ts, testFile{fmt.Sprintf("f%d.txt", i), "text/plain", textFile(fmt.Sprintf("f%d", i), 40<<10)})
	}
	h = buildWithFiles(t, es, files)
	if len(h.Messages) != 1 || len(h.Messages[0].Blocks) != 8 {
		t.Fatalf("history = %d messages, %d blocks", len(h.Messages), len(h.Messages[0].Blocks))
	}
	total := 0
	for i := range 4 {
		b := h.Messages[0].Blocks[2*i+1].Text
		total += len(b)
		if i == 0 {
			want := "[File f0.txt (text/plain, 40.0 KB) shared by Alice: its text is not shown: the files shared later already fill the 96.0 KB of file text one request may carry.]"
			if b != want {
				t.Errorf("oldest file = %q, want %q", b, want)
			}
			continue
		}
		if !strings.Contains(b, "FIRST f") || !strings.Contains(b, "LAST\n```") || !strings.Contains(b, "left out above") {
			t.Errorf("file %d is not shown cut: %q…", i, b[:100])
		}
	}
	if total > maxFilesText+2000 {
		t.Errorf("file text of the request = %d bytes, over the %d budget", total, maxFilesText)
	}
	if files.reads != 4 {
		t.Errorf("%d reads, want 4", files.reads)
	}
}

// Images the providers would refuse (too large encoded, too many pixels, damaged) become notes;
// past maxMediaBlocks, the oldest images are named instead of sent; merged messages keep their
// media and pass validate.
func TestImageLimits(t *testing.T) {
	t.Parallel()
	files := &mapFiles{data: map[string][]byte{}}
	var es events
	es.user("1.1", "three odd images")
	huge := append(pngOf(t, 1, 1), make([]byte, maxImageBase64/4*3)...) // just over 5 MB once base64-encoded
	es.share(files, "1.1",
		testFile{"huge.png", "image/png", huge},
		testFile{"wide.png", "image/png", pngOf(t, maxImageSide+1, 1)},
		testFile{"broken.png", "image/png", pngOf(t, 2, 2)[:30]})
	h := buildWithFiles(t, es, files)
	text := shape(h.Messages)
	for _, want := range []string{
		"[File huge.png (image/png, 3.8 MB) shared by Alice: it is too large to show as an image (3.8 MB; the limit is 5.0 MB base64-encoded, about 3.8 MB).]",
		"[File wide.png (image/png, ", "it is too large to show as an image (8001×1 pixels; the limit is 8000 on each side).]",
		"[File broken.png (image/png, 30 B) shared by Alice: it could not be read as an image",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("history lacks %q:\n%s", want, text)
		}
	}

	files = &mapFiles{data: map[string][]byte{}}
	es = nil
	for i := range maxMediaBlocks + 1 {
		ts := fmt.Sprintf("2.%02d", i)
		es.user(ts, fmt.Sprintf("picture %d", i))
		es.share(files, ts, testFile{fmt.Sprintf("p%d.png", i), "image/png", pngOf(t, i+1, 1)})
	}
	h = buildWithFiles(t, es, files)
	if len(h.Messages) != 1 {
		t.Fatalf("history = %s", shape(h.Messages))
	}
	images := 0
	for _, b := range h.Messages[0].Blocks {
		if b.Image != nil {
			images++
		}
	}
	if images != maxMediaBlocks || !strings.Contains(h.Messages[0].Blocks[1].Text, "[File p0.png (image/png, ") ||
		!strings.Contains(h.Messages[0].Blocks[1].Text, "it is not shown as an image: later files already fill what one request may carry.]") {
		t.Errorf("%d images; the oldest shows as %q", images, h.Messages[0].Blocks[1].Text)
	}
	if err := validate(h.Messages, true); err != nil {
		t.Errorf("validate: %v", err)
	}
	if est := estimateTokens("", h.Messages, nil); est < maxMediaBlocks*imageTokens {
		t.Errorf("estimate %d tokens does not count the images", est)
	}
	if tr := transcript(h.Messages, 100); strings.Contains(tr, "\x89PNG") || !strings.Contains(tr, "[image p20.png (image/png, ") {
		t.Errorf("transcript:\n%s", tr)
	}
}

// validate takes media in user messages only, with a type the providers take; normalize
// keeps a message made only of media.
func TestValidateMedia(t *testing.T) {
	t.Parallel()
	img := &Media{MediaType: "image/png", Data: pngOf(t, 1, 1), Name: "a.png"}
	ok := []Message{{Role: RoleUser, Blocks: []Block{{Text: "Alice: see"}, {Image: img}, {Document: &Media{MediaType: "application/pdf", Data: []byte("%PDF-1.4")}}}}}
	if err := validate(ok, true); err != nil {
		t.Errorf("validate: %v", err)
	}
	for name, msgs := range map[string][]Message{
		"assistant image": {{Role: RoleUser, Blocks: []Block{{Text: "a"}}}, {Role: RoleAssistant, Blocks: []Block{{Image: img}}}, {Role: RoleUser, Blocks: []Block{{Text: "b"}}}},
		"bmp":             {{Role: RoleUser, Blocks: []Block{{Image: &Media{MediaType: "image/bmp", Data: []byte("BM")}}}}},
		"empty":           {{Role: RoleUser, Blocks: []Block{{Image: &Media{MediaType: "image/png"}}}}},
		"two kinds":       {{Role: RoleUser, Blocks: []Block{{Image: img, Document: img}}}},
		"text document":   {{Role: RoleUser, Blocks: []Block{{Document: &Media{MediaType: "text/plain", Data: []byte("x")}}}}},
	} {
		if err := validate(msgs, true); !errors.Is(err, errInvalidHistory) {
			t.Errorf("%s: validate = %v", name, err)
		}
	}
	h := history{Messages: []Message{{Role: RoleUser, Blocks: []Block{{Text: "a"}}}, {Role: RoleUser, Blocks: []Block{{Image: img}}}},
		Start: []int64{1, 2}, Boundary: []bool{true, true}}
	normalize(&h)
	if len(h.Messages) != 1 || len(h.Messages[0].Blocks) != 2 || h.Messages[0].Blocks[1].Image != img {
		t.Errorf("normalized = %s", shape(h.Messages))
	}
}

// FileKind knows WebP by its signature, and the WebP header gives its size.
func TestWebP(t *testing.T) {
	t.Parallel()
	// A VP8X header: canvas 640×480.
	d := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00\x7f\x02\x00\xdf\x01\x00")
	if k := FileKind("application/octet-stream", "x", d); k != FileKindImage {
		t.Errorf("FileKind(webp) = %q", k)
	}
	if w, h, ok := imageSize(d); !ok || w != 640 || h != 480 {
		t.Errorf("imageSize(webp) = %d×%d %v", w, h, ok)
	}
}

// On api.openai.com a PDF goes as a file part (file_data a data URL, with its filename),
// which the fake decodes intact; an image as an image_url data URL.
func TestOpenAIHostedSendsPDFAsFilePart(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.NewOpenAI(t, "sk-test")
	fake.Push(fakeprovider.Reply{Text: "A report."})
	p := newOpenAI("gpt-4o", "sk-test", fake.URL, http.DefaultClient)
	p.hosted, p.vision = true, true // as for api.openai.com
	pdf := []byte("%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF\n")
	pic := pngOf(t, 3, 2)
	_, err := p.Complete(t.Context(), Request{Messages: []Message{{Role: RoleUser, Blocks: []Block{
		{Text: "Alice: what is it?"}, {Document: &Media{MediaType: "application/pdf", Data: pdf, Name: "q3.pdf"}},
		{Text: "and this"}, {Image: &Media{MediaType: "image/png", Data: pic}},
	}}}, MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	c := fake.Calls()[0]
	if c.Invalid != "" {
		t.Fatal(c.Invalid)
	}
	bs := c.Messages[0].Blocks
	if len(bs) != 4 || bs[1].Type != "document" || bs[1].Name != "q3.pdf" || !bytes.Equal(bs[1].Data, pdf) ||
		bs[3].Type != "image" || bs[3].MediaType != "image/png" || !bytes.Equal(bs[3].Data, pic) || bs[2].Text != "and this" {
		t.Errorf("received %+v", bs)
	}
	if !bytes.Contains(c.Body, []byte(`"file_data":"data:application/pdf;base64,`+base64.StdEncoding.EncodeToString(pdf)+`"`)) {
		t.Errorf("body lacks the PDF as a data URL: %s", c.Body)
	}
}

// PDFs the providers would refuse (cut short, encrypted, too many pages) become notes.
func TestPDFLimits(t *testing.T) {
	t.Parallel()
	files := &mapFiles{data: map[string][]byte{}}
	var es events
	es.user("1.1", "three odd PDFs")
	es.share(files, "1.1",
		testFile{"cut.pdf", "application/pdf", []byte("%PDF-1.4\n1 0 obj << /Type /Page >>")},
		testFile{"locked.pdf", "application/pdf", []byte("%PDF-1.4\ntrailer << /Encrypt 5 0 R >>\n%%EOF\n")},
		testFile{"long.pdf", "application/pdf", []byte("%PDF-1.4\n" + strings.Repeat("<< /Type /Page >>\n", maxPDFPages+1) + "<< /Type /Pages >>\n%%EOF\n")},
		testFile{"ok.pdf", "application/pdf", []byte("%PDF-1.4\n" + strings.Repeat("<< /Type /Page >>\n", maxPDFPages) + "<< /Type /Pages >>\n%%EOF\n")})
	h := buildWithFiles(t, es, files)
	text := shape(h.Messages)
	for _, want := range []string{
		"[File cut.pdf (application/pdf, 34 B) shared by Alice: it could not be read as a PDF (it has no end marker: it looks cut short or damaged).]",
		"[File locked.pdf (application/pdf, 44 B) shared by Alice: it is an encrypted (password-protected) PDF, which the model cannot read.]",
		"shared by Alice: it has 101 pages, more than the 100 a request may carry, so it is not shown.]",
		"|document:ok.pdf]",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("history lacks %q:\n%s", want, text)
		}
	}
	if got := estimateTokens("", h.Messages, nil); got < maxPDFPages*pdfPageTokens {
		t.Errorf("estimate %d tokens for a %d-page PDF", got, maxPDFPages)
	}
}
