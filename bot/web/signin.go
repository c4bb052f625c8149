package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Sign-in links' names and lifetimes.
const (
	signInParam   = "signin"         // the query parameter carrying a link's token
	signInCookie  = "logbook_signin" // the cookie a redeemed link sets
	signInLinkTTL = time.Hour
	signInTTL     = 12 * time.Hour
)

// SignIn lets one local person in through one-time links; `logbook dev` uses it, on
// loopback, so the pages open from a link in the terminal. Link returns a URL carrying a
// fresh random token (32 bytes from crypto/rand); the first GET with it sets a session
// cookie (HttpOnly, SameSite=Strict, Secure over TLS) and answers 303 See Other to the same
// page without the token. A token works once and for an hour; the cookie for 12 hours. A
// used, expired or unknown token gets 401.
//
// The cookie stands for a bearer token that never leaves the process: add Token() to
// Access.Tokens, and wrap Handler's result with Wrap. Requests through the cookie are
// therefore access-logged as that token (who = the name given to NewSignIn, via
// bearer_token).
type SignIn struct {
	token Token
	now   func() time.Time

	mu       sync.Mutex
	links    map[[32]byte]time.Time // sha256 of a link's token → when it expires
	sessions map[[32]byte]time.Time // sha256 of a cookie's value → when it expires
}

// NewSignIn returns a SignIn for the person who (recorded in the access log).
func NewSignIn(who string, auditor bool) (*SignIn, error) {
	secret, err := randomToken()
	if err != nil {
		return nil, err
	}
	return &SignIn{token: Token{Name: who, Secret: secret, Auditor: auditor}, now: time.Now,
		links: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}}, nil
}

// Token is the bearer token the sign-in cookie stands for; add it to Access.Tokens.
func (s *SignIn) Token() Token { return s.token }

// Link returns base (the pages' address, e.g. http://127.0.0.1:8080/) with a new one-time
// token.
func (s *SignIn) Link(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("sign-in link for %q: %w", base, err)
	}
	tok, err := randomToken()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.expireLocked()
	s.links[sha256.Sum256([]byte(tok))] = s.now().Add(signInLinkTTL)
	s.mu.Unlock()
	q := u.Query()
	q.Set(signInParam, tok)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// signInLinkKey marks a request signed in through a SignIn link's cookie; its value is the
// Identity of SignIn's token.
type signInLinkKey struct{}

// Wrap redeems sign-in links and lets requests carrying a valid sign-in cookie through to
// pages as the bearer of Token. A sign-out from the pages themselves (POST /signout) ends the
// cookie's session here, then reaches pages, which record it. Other requests reach pages
// unchanged. Every answer carries the pages' security headers.
func (s *SignIn) Wrap(pages http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		q := r.URL.Query()
		if q.Has(signInParam) {
			s.redeem(w, r, q)
			return
		}
		c, err := r.Cookie(signInCookie)
		if err != nil || r.Header.Get("Authorization") != "" || !s.signedIn(c.Value) {
			pages.ServeHTTP(w, r)
			return
		}
		id := Identity{Who: s.token.Name, Via: "bearer_token", Auditor: s.token.Auditor, browser: true}
		r = r.Clone(context.WithValue(r.Context(), signInLinkKey{}, id))
		if r.Method == http.MethodPost && r.URL.Path == "/signout" && sameOrigin(r, "") {
			s.mu.Lock()
			delete(s.sessions, sha256.Sum256([]byte(c.Value)))
			s.mu.Unlock()
			http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		} else {
			r.Header.Set("Authorization", "Bearer "+s.token.Secret)
		}
		pages.ServeHTTP(w, r)
	})
}

func (s *SignIn) redeem(w http.ResponseWriter, r *http.Request, q url.Values) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "sign-in links are opened with GET", http.StatusMethodNotAllowed)
		return
	}
	key := sha256.Sum256([]byte(q.Get(signInParam)))
	s.mu.Lock()
	s.expireLocked()
	_, ok := s.links[key]
	delete(s.links, key) // single use, whatever happens next
	s.mu.Unlock()
	if !ok {
		if c, err := r.Cookie(signInCookie); err == nil && s.signedIn(c.Value) {
			http.Redirect(w, r, withoutToken(r.URL, q), http.StatusSeeOther) // signed in already
			return
		}
		http.Error(w, "This sign-in link was used already or has expired. Ask logbook dev for a new one (/web in its chat).", http.StatusUnauthorized)
		return
	}
	value, err := randomToken()
	if err != nil {
		http.Error(w, "sign-in failed", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.sessions[sha256.Sum256([]byte(value))] = s.now().Add(signInTTL)
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: value, Path: "/", MaxAge: int(signInTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, withoutToken(r.URL, q), http.StatusSeeOther)
}

// signedIn reports whether value is a live sign-in cookie.
func (s *SignIn) signedIn(value string) bool {
	key := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.sessions[key]
	return ok && s.now().Before(until)
}

func (s *SignIn) expireLocked() {
	now := s.now()
	for k, until := range s.links {
		if !now.Before(until) {
			delete(s.links, k)
		}
	}
	for k, until := range s.sessions {
		if !now.Before(until) {
			delete(s.sessions, k)
		}
	}
}

// withoutToken is the request's own path and query without the sign-in token: a local
// path, never another host.
func withoutToken(u *url.URL, q url.Values) string {
	q.Del(signInParam)
	p := u.EscapedPath()
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		p = "/"
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("sign-in token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
