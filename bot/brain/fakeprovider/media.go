package fakeprovider

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig of received images
	_ "image/jpeg"
	_ "image/png"
	"net/http"
	"strings"
)

// imageTypes are the image media types both APIs take.
var imageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// Limits the Messages API applies to images and requests.
const (
	maxImageBase64   = 5 << 20  // per image, on the base64 text: "image exceeds 5 MB maximum"
	maxImageSide     = 8000     // pixels, each side
	maxImages        = 100      // images per request
	maxAnthropicBody = 32 << 20 // bytes per request (413 request_too_large)
)

// decodeBase64 decodes the standard base64 the APIs take (padding required, no line breaks).
func decodeBase64(s string) ([]byte, error) {
	return base64.StdEncoding.Strict().DecodeString(s)
}

// checkImage checks decoded image data against its declared media type and the size limits,
// as the APIs do; "" when it passes.
func checkImage(mediaType string, data []byte) string {
	if got := http.DetectContentType(data); got != mediaType {
		return fmt.Sprintf("Image does not match the provided media type %s", mediaType)
	}
	if mediaType == "image/webp" {
		return "" // the standard library reads no WebP header; the signature matched
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return "Could not process image"
	}
	if cfg.Width > maxImageSide || cfg.Height > maxImageSide {
		return fmt.Sprintf("image dimensions exceed max allowed size: %d pixels", maxImageSide)
	}
	return ""
}

// checkPDF checks decoded PDF data; "" when it passes.
func checkPDF(data []byte) string {
	if !bytes.Contains(data[:min(len(data), 1024)], []byte("%PDF-")) {
		return "The PDF specified was not valid."
	}
	return ""
}

// anthropicSource is the source of an Anthropic image or document block.
type anthropicSource struct {
	Type      string  `json:"type"`
	MediaType string  `json:"media_type"`
	Data      *string `json:"data"`
}

// parseAnthropicMedia parses an image or document block of message i, block j.
func parseAnthropicMedia(i, j int, role string, b anthropicBlock) (Block, error) {
	at := fmt.Sprintf("messages.%d.content.%d", i, j)
	if role != "user" {
		return Block{}, fmt.Errorf("%s: %s blocks are only allowed in user messages", at, b.Type)
	}
	var src anthropicSource
	if len(b.Source) == 0 || json.Unmarshal(b.Source, &src) != nil || src.Type == "" {
		return Block{}, fmt.Errorf("%s.%s.source: Field required", at, b.Type)
	}
	if src.Type != "base64" {
		// The API also takes url and file sources (and text and content documents); the brain
		// sends base64 only, so the fake serves nothing else.
		return Block{}, fmt.Errorf("%s.%s.source: fakeprovider takes only base64 sources, not %q", at, b.Type, src.Type)
	}
	if src.Data == nil {
		return Block{}, fmt.Errorf("%s.%s.source.base64.data: Field required", at, b.Type)
	}
	out := Block{Type: b.Type, MediaType: src.MediaType}
	switch b.Type {
	case "image":
		if !imageTypes[src.MediaType] {
			return Block{}, fmt.Errorf("%s.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'", at)
		}
		if len(*src.Data) > maxImageBase64 {
			return Block{}, fmt.Errorf("%s.image.source.base64: image exceeds 5 MB maximum: %d bytes > %d bytes", at, len(*src.Data), maxImageBase64)
		}
		data, err := decodeBase64(*src.Data)
		if err != nil {
			return Block{}, fmt.Errorf("%s.image.source.base64.data: invalid base64 data", at)
		}
		if why := checkImage(src.MediaType, data); why != "" {
			return Block{}, fmt.Errorf("%s.image.source.base64.data: %s", at, why)
		}
		out.Data = data
	case "document":
		if src.MediaType != "application/pdf" {
			return Block{}, fmt.Errorf("%s.document.source.base64.media_type: Input should be 'application/pdf'", at)
		}
		data, err := decodeBase64(*src.Data)
		if err != nil {
			return Block{}, fmt.Errorf("%s.document.source.base64.data: invalid base64 data", at)
		}
		if why := checkPDF(data); why != "" {
			return Block{}, fmt.Errorf("%s.pdf: %s", at, why)
		}
		out.Data = data
		if b.Title != nil {
			if strings.TrimSpace(*b.Title) == "" {
				return Block{}, fmt.Errorf("%s.document.title: String should have at least 1 character", at)
			}
			out.Name = *b.Title
		}
	}
	return out, nil
}

// openAIPart is one content part of a Chat Completions message.
type openAIPart struct {
	Type     string  `json:"type"`
	Text     *string `json:"text"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
	File *struct {
		Filename *string `json:"filename"`
		FileData *string `json:"file_data"`
		FileID   *string `json:"file_id"`
	} `json:"file"`
	InputAudio json.RawMessage `json:"input_audio"`
}

// parseDataURL splits "data:<media type>;base64,<data>".
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	head, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", false
	}
	mediaType, ok = strings.CutSuffix(head, ";base64")
	return mediaType, data, ok
}

// parseOpenAIUser parses the content of user message i: a string, or an array of text,
// image_url and file parts.
func parseOpenAIUser(i int, raw json.RawMessage) ([]Block, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Block{{Type: "text", Text: s}}, nil
	}
	var parts []openAIPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("Invalid 'messages[%d].content': content is neither a string nor a list of parts", i)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("Invalid 'messages[%d].content': empty array. Expected an array with minimum length 1, but got an empty array instead.", i)
	}
	var out []Block
	for j, p := range parts {
		at := fmt.Sprintf("messages[%d].content[%d]", i, j)
		switch p.Type {
		case "text":
			if p.Text == nil {
				return nil, fmt.Errorf("Missing required parameter: '%s.text'.", at)
			}
			out = append(out, Block{Type: "text", Text: *p.Text})
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return nil, fmt.Errorf("Missing required parameter: '%s.image_url.url'.", at)
			}
			switch p.ImageURL.Detail {
			case "", "auto", "low", "high", "original":
			default:
				return nil, fmt.Errorf("Invalid value: '%s'. Supported values are: 'auto', 'low', 'high', and 'original'.", p.ImageURL.Detail)
			}
			mt, enc, ok := parseDataURL(p.ImageURL.URL)
			if !ok {
				// The API also fetches http(s) URLs; the brain sends data URLs only.
				return nil, fmt.Errorf("Invalid '%s.image_url.url': fakeprovider takes only base64 data URLs ('data:image/png;base64,...').", at)
			}
			if !imageTypes[mt] {
				return nil, fmt.Errorf("Invalid '%s.image_url.url'. Expected a base64-encoded data URL with an image MIME type "+
					"(e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got unsupported MIME type '%s'.", at, mt)
			}
			data, err := decodeBase64(enc)
			if err != nil {
				return nil, fmt.Errorf("Invalid '%s.image_url.url'. Expected a base64-encoded data URL with an image MIME type, but got a value that is not valid base64.", at)
			}
			if why := checkImage(mt, data); why != "" {
				return nil, fmt.Errorf("You uploaded an unsupported image (%s): %s. Please make sure your image is valid.", at, why)
			}
			out = append(out, Block{Type: "image", MediaType: mt, Data: data})
		case "file":
			if p.File == nil {
				return nil, fmt.Errorf("Missing required parameter: '%s.file'.", at)
			}
			if p.File.FileID != nil {
				return nil, fmt.Errorf("Invalid '%s.file.file_id': fakeprovider serves no uploaded files; send file_data.", at)
			}
			if p.File.FileData == nil {
				return nil, fmt.Errorf("Missing required parameter: '%s.file.file_data'.", at)
			}
			if p.File.Filename == nil || strings.TrimSpace(*p.File.Filename) == "" {
				return nil, fmt.Errorf("Missing required parameter: '%s.file.filename'.", at)
			}
			mt, enc, ok := parseDataURL(*p.File.FileData)
			if !ok {
				return nil, fmt.Errorf("Invalid '%s.file.file_data': expected a base64-encoded data URL ('data:application/pdf;base64,...').", at)
			}
			if mt != "application/pdf" {
				return nil, fmt.Errorf("Invalid '%s.file.file_data': unsupported MIME type '%s'. Expected context stuffing file type to be a supported format: .pdf.", at, mt)
			}
			data, err := decodeBase64(enc)
			if err != nil {
				return nil, fmt.Errorf("Invalid '%s.file.file_data': the file data is not valid base64.", at)
			}
			if why := checkPDF(data); why != "" {
				return nil, fmt.Errorf("Invalid '%s.file': %s", at, why)
			}
			out = append(out, Block{Type: "document", MediaType: mt, Data: data, Name: *p.File.Filename})
		case "input_audio":
			return nil, fmt.Errorf("Invalid '%s': fakeprovider takes no audio.", at)
		default:
			return nil, fmt.Errorf("Invalid value: '%s'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'.", p.Type)
		}
	}
	return out, nil
}

// openAINonUserParts rejects parts other than text (and, for assistants, refusal) in a
// message of role: the API takes images and files in user messages only.
func openAINonUserParts(i int, role string, raw json.RawMessage) error {
	var parts []openAIPart
	if json.Unmarshal(raw, &parts) != nil {
		return nil // a string, or not content at all: textOf says
	}
	for j, p := range parts {
		switch {
		case p.Type == "text", p.Type == "refusal" && role == "assistant":
		case p.Type == "image_url":
			return fmt.Errorf("Invalid 'messages[%d]'. Image URLs are only allowed for messages with role 'user', but this message with role '%s' contains an image URL.", i, role)
		case p.Type == "file":
			return fmt.Errorf("Invalid 'messages[%d]'. Files are only allowed for messages with role 'user', but this message with role '%s' contains a file.", i, role)
		default:
			return fmt.Errorf("Invalid value: 'messages[%d].content[%d].type' = '%s'. Messages with role '%s' take only text parts.", i, j, p.Type, role)
		}
	}
	return nil
}
