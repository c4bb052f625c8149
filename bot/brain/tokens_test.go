package brain

import "testing"

// The embedded BPE files are used (nothing is downloaded) and counts follow tiktoken.
func TestTiktokenCountsOffline(t *testing.T) {
	t.Parallel()
	enc, err := encoding(openAIEncoding("gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(enc.EncodeOrdinary("hello world")); got != 2 {
		t.Errorf("o200k_base tokens of %q = %d, want 2", "hello world", got)
	}
	req := Request{Messages: []Message{{Role: RoleUser, Blocks: []Block{{Text: "hello world"}}}}}
	if got := countChatTokens(enc, req); got != 3+3+2 {
		t.Errorf("request tokens = %d, want 8", got)
	}
	for model, want := range map[string]string{"gpt-4o": "o200k_base", "gpt-4-turbo": "cl100k_base", "o3-mini": "o200k_base", "qwen2.5": ""} {
		if got := openAIEncoding(model); got != want {
			t.Errorf("encoding of %s = %q, want %q", model, got, want)
		}
	}
}
