package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
)

// OpenBucket opens a destination: a plain directory path (created if missing) or a URL that
// gocloud.dev/blob understands. file:// is built in; s3://, gs:// and azblob:// need the
// caller to blank-import the matching driver (gocloud.dev/blob/s3blob, gcsblob, azureblob).
// For directories and file:// URLs no metadata sidecar files are written, so an export is
// exactly its listed files. The caller closes the bucket.
func OpenBucket(ctx context.Context, dest string) (*blob.Bucket, error) {
	if dest == "" {
		return nil, fmt.Errorf("open destination: %w: empty", ErrInvalid)
	}
	if u, err := url.Parse(dest); err == nil && len(u.Scheme) > 1 {
		if u.Scheme == "file" {
			q := u.Query()
			if !q.Has("create_dir") {
				q.Set("create_dir", "true")
			}
			if !q.Has("metadata") {
				q.Set("metadata", "skip") // no .attrs sidecar files beside the export
			}
			u.RawQuery = q.Encode()
			dest = u.String()
		}
		b, err := blob.OpenBucket(ctx, dest)
		if err != nil {
			return nil, fmt.Errorf("open destination %s: %w", u.Redacted(), err)
		}
		return b, nil
	}
	dir, err := filepath.Abs(dest)
	if err != nil {
		return nil, fmt.Errorf("open destination %s: %w", dest, err)
	}
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{CreateDir: true, NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
	if err != nil {
		return nil, fmt.Errorf("open destination %s: %w", dir, err)
	}
	return b, nil
}

// SplitObject splits the location of one object (a path or a URL) into the location of
// its bucket and its key: "/x/y/cp.json" is ("/x/y", "cp.json"), and
// "file:///x/y/cp.json?a=b" is ("file:///x/y?a=b", "cp.json").
func SplitObject(loc string) (bucket, key string) {
	if u, err := url.Parse(loc); err == nil && len(u.Scheme) > 1 {
		p := strings.TrimPrefix(u.Path, "/")
		if u.Scheme == "file" {
			dir, k := filepath.Split(u.Path)
			u.Path = strings.TrimSuffix(dir, "/")
			return u.String(), k
		}
		k := p
		u.Path = ""
		return u.String(), k
	}
	dir, k := filepath.Split(loc)
	if dir == "" {
		dir = "."
	}
	return dir, k
}

// GenerateKey makes an ed25519 key pair and returns them PEM-encoded (PKCS #8 private key,
// PKIX public key).
func GenerateKey() (privPEM, pubPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("encode private key: %w", err)
	}
	px, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: px}), nil
}

// ParsePrivateKey parses a PEM PKCS #8 ed25519 private key. The error never quotes the key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	// x509's error may quote the key's bytes: it is not passed on.
	return parseKey[ed25519.PrivateKey](b, "PRIVATE KEY", "private key", x509.ParsePKCS8PrivateKey,
		func(error) string { return "not PKCS #8" })
}

// ParsePublicKey parses a PEM PKIX ed25519 public key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	return parseKey[ed25519.PublicKey](b, "PUBLIC KEY", "public key", x509.ParsePKIXPublicKey, error.Error)
}

// parseKey parses b's PEM block, which must be of type typ, with parse into an ed25519 key K;
// what names the key in the error, which never quotes b, and why says what of parse's error
// it may show.
func parseKey[K ed25519.PrivateKey | ed25519.PublicKey](b []byte, typ, what string, parse func([]byte) (any, error), why func(error) string) (K, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("parse %s: %w: not a PEM %s block", what, ErrInvalid, typ)
	}
	k, err := parse(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w: %s", what, ErrInvalid, why(err))
	}
	key, ok := k.(K)
	if !ok {
		return nil, fmt.Errorf("parse %s: %w: not an ed25519 key", what, ErrInvalid)
	}
	return key, nil
}

// ReadPrivateKeyFile reads a private key written by GenerateKey.
func ReadPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	return ParsePrivateKey(b)
}

// ReadPublicKeyFile reads a public key written by GenerateKey.
func ReadPublicKeyFile(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	return ParsePublicKey(b)
}
