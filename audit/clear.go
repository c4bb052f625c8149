package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/logbook/logbook/session"
)

// ErrNotEmpty: an export's destination (a directory or a bucket prefix) holds objects
// already. Export refuses it unless ExporterOptions.Overwrite, so two exports' files are
// never mixed and an earlier export is never replaced by surprise.
var ErrNotEmpty = errors.New("the destination is not empty")

// exportFile reports whether name (relative to an export's prefix) is a name an export
// writes: its event and record files in either format, a file's content, the manifest and
// its signature.
func exportFile(name string) bool {
	switch name {
	case ManifestName, SignatureName:
		return true
	}
	if sha, ok := strings.CutPrefix(name, FilesDir); ok {
		return session.ValidFileHash(sha)
	}
	for _, base := range []string{"events.", "access.", "web_access.", "spend.", "budget_raises.", "schedules.", "schedule_ticks.", "hook_deliveries.", "automations."} {
		if ext, ok := strings.CutPrefix(name, base); ok {
			_, err := ParseFormat(ext)
			return err == nil
		}
	}
	return false
}

// objectsUnder lists the keys of the objects under prefix ("" or ending in "/"), every
// level down.
func objectsUnder(ctx context.Context, dst *blob.Bucket, prefix string) ([]string, error) {
	var keys []string
	it := dst.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
}

// CheckEmpty fails with ErrNotEmpty, naming an object, when prefix in dst holds any; with
// overwrite, only when it holds an object that is no export's file (which ClearExport would
// not delete). Export checks it first; a caller may check it before it records the export.
func CheckEmpty(ctx context.Context, dst *blob.Bucket, prefix string, overwrite bool) error {
	return checkEmpty(ctx, dst, normPrefix(prefix), overwrite)
}

func checkEmpty(ctx context.Context, dst *blob.Bucket, prefix string, overwrite bool) error {
	keys, err := objectsUnder(ctx, dst, prefix)
	if err != nil {
		return err
	}
	if len(keys) > 0 && !overwrite {
		if slices.Contains(keys, prefix+ManifestName) {
			return fmt.Errorf("%w: it holds an export already (%s, %d objects)", ErrNotEmpty, prefix+ManifestName, len(keys))
		}
		return fmt.Errorf("%w: %s is there (%d objects)", ErrNotEmpty, keys[0], len(keys))
	}
	for _, k := range keys {
		if !exportFile(strings.TrimPrefix(k, prefix)) {
			return fmt.Errorf("%w: %q is not an export's file; an export replaces only an earlier export", ErrNotEmpty, k)
		}
	}
	return nil
}

// ClearExport deletes an earlier export under prefix in dst, so a new one can take its place
// without the two mixing. The manifest goes first: if the process dies midway, what is left
// has no manifest, fails verify-export, and is cleared again by the next ClearExport. It
// deletes nothing when prefix holds an object that is no export's file (ErrNotEmpty).
func ClearExport(ctx context.Context, dst *blob.Bucket, prefix string) error {
	prefix = normPrefix(prefix)
	if err := checkEmpty(ctx, dst, prefix, true); err != nil {
		return fmt.Errorf("clear the export under %q: %w", prefix, err)
	}
	keys, err := objectsUnder(ctx, dst, prefix)
	if err != nil {
		return fmt.Errorf("clear the export under %q: %w", prefix, err)
	}
	first := []string{prefix + ManifestName, prefix + SignatureName}
	for _, k := range keys {
		if k != first[0] && k != first[1] {
			first = append(first, k)
		}
	}
	for _, k := range first {
		if err := dst.Delete(ctx, k); err != nil && !isNotFound(err) {
			return fmt.Errorf("clear the export under %q: delete %s: %w", prefix, k, err)
		}
	}
	return nil
}

// normPrefix is prefix as a folder: "" or ending in "/".
func normPrefix(prefix string) string {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return prefix
}

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }
