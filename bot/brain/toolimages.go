package brain

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/logbook/logbook/session"
)

// FileKeeper keeps content by its hash for a session (*filestore.Store is one): the images a
// tool returns are kept there once, and the tool_result names them by hash.
type FileKeeper interface {
	Put(ctx context.Context, id session.ID, data []byte) (string, error)
}

// maxResultImages bounds the images one tool result shows; the rest are named.
const maxResultImages = 8

// screenImages splits the images a tool returned into those the model APIs take as
// images (PNG, JPEG, GIF, WebP by their content, within the size limits), and a line naming
// each of the others with its type, size and why it is not shown. keep says whether the
// turn can keep images at all (a file store); without one every image is named.
func screenImages(in []Media, keep bool) (shown []Media, notes []string) {
	for _, im := range in {
		why := ""
		mt := imageType(im.Data)
		switch {
		case mt == "":
			why = "not an image type the model takes (PNG, JPEG, GIF or WebP)"
		case imageProblem(im.Data) != "":
			why = imageProblem(im.Data)
		case !keep:
			why = "this deployment keeps no files, so images are not kept for the model"
		case len(shown) == maxResultImages:
			why = fmt.Sprintf("a result shows at most %d images", maxResultImages)
		}
		if why != "" {
			notes = append(notes, fmt.Sprintf("[image %s, %s, not shown: %s]",
				nonEmpty(baseMime(im.MediaType), "of no type"), session.FileSize(int64(len(im.Data))), why))
			continue
		}
		shown = append(shown, Media{MediaType: mt, Data: im.Data})
	}
	return shown, notes
}

// keepImages stores the images of a result in the turn's file store, for the tool_result's
// Images. A failed store names the image in the text instead; it never fails the turn.
func (b *Brain) keepImages(ctx context.Context, st *turn, out *Outcome) []session.ToolImage {
	var refs []session.ToolImage
	for _, im := range out.Images {
		sha, err := st.Keep.Put(ctx, st.Session.ID, im.Data)
		if err != nil {
			st.log.Warn().Err(err).Msg("could not keep an image a tool returned; the model gets its type and size")
			out.Content = strings.TrimSpace(out.Content + "\n" + fmt.Sprintf("[image %s, %s, not shown: it could not be stored]",
				im.MediaType, session.FileSize(int64(len(im.Data)))))
			continue
		}
		refs = append(refs, session.ToolImage{SHA256: sha, MediaType: im.MediaType, Size: int64(len(im.Data))})
	}
	return refs
}

// resultImages is the images of a recorded tool result as the history shows them: those
// whose content the Run loaded, and a note for each of the others.
func resultImages(r session.ToolResult, files *fileCache) ([]Media, string) {
	var shown []Media
	var notes []string
	for _, im := range r.Images {
		data, ok := files.get(im.SHA256)
		if !ok {
			notes = append(notes, fmt.Sprintf("[%s returned here; its content could not be loaded]", im.Label()))
			continue
		}
		shown = append(shown, Media{MediaType: im.MediaType, Data: data, Name: im.Label()})
	}
	return shown, strings.Join(notes, "\n")
}

// fitToolImages keeps the images of tool results within what one request carries beside the
// shared files' images and documents (maxRequestMedia, maxMediaBlocks), newest first: an
// older image that no longer fits becomes a line naming it in its result's text.
func fitToolImages(h *history) {
	media, blocks := maxRequestMedia, maxMediaBlocks
	for _, m := range h.Messages {
		for _, b := range m.Blocks {
			if md := b.media(); md != nil {
				media -= base64.StdEncoding.EncodedLen(len(md.Data))
				blocks--
			}
		}
	}
	for i := len(h.Messages) - 1; i >= 0; i-- {
		for j := len(h.Messages[i].Blocks) - 1; j >= 0; j-- {
			r := h.Messages[i].Blocks[j].ToolResult
			if r == nil || len(r.Images) == 0 {
				continue
			}
			var kept []Media
			var notes []string
			for _, im := range r.Images {
				enc := base64.StdEncoding.EncodedLen(len(im.Data))
				if blocks <= 0 || enc > media {
					notes = append(notes, fmt.Sprintf("[%s not shown: later images and files already fill what one request may carry]", im.Name))
					continue
				}
				blocks--
				media -= enc
				kept = append(kept, im)
			}
			if len(notes) > 0 {
				r.Content = strings.TrimSpace(r.Content + "\n" + strings.Join(notes, "\n"))
			}
			r.Images = kept
		}
	}
}

// imagesLine is the line that stands for a result's images where they cannot go as images
// (a model not given images, a summary's text): "[the tool returned image (png, 1.2 KB)]".
func imagesLine(ims []Media) string {
	if len(ims) == 0 {
		return ""
	}
	names := make([]string, len(ims))
	for i, im := range ims {
		names[i] = toolImageName(im)
	}
	return "[the tool returned " + strings.Join(names, ", ") + "]"
}

func toolImageName(im Media) string {
	if im.Name != "" {
		return im.Name
	}
	return session.ToolImage{MediaType: im.MediaType, Size: int64(len(im.Data))}.Label()
}
