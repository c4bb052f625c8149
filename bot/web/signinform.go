package web

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/logbook/logbook/session"
)

// securityHeaders are sent with every answer of the pages, sign-in and errors included: no
// script, nothing framed (frame-ancestors and X-Frame-Options, against clickjacking), forms
// only to the pages themselves. The file route narrows the policy further.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// guard sends the security headers and refuses every state-changing request (any method but
// GET and HEAD) that does not come from the pages' own origin: login CSRF (a foreign site
// posting its own token to /signin) and forced sign-out are answered 403 and recorded.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r, s.cfg.PublicURL) {
			switch r.URL.Path {
			case "/signin":
				s.recordFailure(r, "signin", triedForm, http.StatusForbidden)
			case "/signout":
				s.recordFailure(r, "signout", triedForm, http.StatusForbidden)
			}
			w.Header().Set("Cache-Control", "no-store")
			s.page(w, http.StatusForbidden, "message", pageData{Title: "Refused",
				Message: "This form was not sent from these pages, so it was refused. Open the pages and use their own form."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether a state-changing request comes from the pages themselves. A
// browser says so in Sec-Fetch-Site (only "same-origin" passes); without it, in Origin; without
// that, in Referer. The origin must be the request's own host (r.Host, as the browser
// addressed it), or publicURL's origin. A request that says nothing is refused: every browser
// sends Origin with a form POST, and a script can send one.
func sameOrigin(r *http.Request, publicURL string) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "":
	default: // cross-site, same-site, none
		return false
	}
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	if from == "" || from == "null" {
		return false
	}
	u, err := url.Parse(from)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	if p, err := url.Parse(publicURL); err == nil && p.Host != "" {
		return strings.EqualFold(p.Scheme, u.Scheme) && strings.EqualFold(p.Host, u.Host)
	}
	return false
}

// signinForm is the sign-in page: a form for a bearer token's secret, for browsers (which
// cannot send an Authorization header by themselves).
func (s *server) signinForm(w http.ResponseWriter, r *http.Request) {
	s.unauthorized(w, r, http.StatusOK, "")
}

// signin checks a pasted token and, when it is valid, opens a sign-in session: a random id
// in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS), its hash in SignIns, for
// sessionAge or until sign-out; then goes to the list. The token's secret is never put in the
// cookie. Every attempt is recorded in the access log, a failed one as anonymous (never with
// the secret tried).
func (s *server) signin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if s.cfg.SignIns == nil {
		s.page(w, http.StatusNotFound, "message", pageData{Title: "Not available",
			Message: "Signing in with a token is not available here: send it in an Authorization header."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	id, ok := s.auth.token(secret)
	if !ok || secret == "" {
		s.recordFailure(r, "signin", triedForm, http.StatusUnauthorized)
		s.unauthorized(w, r, http.StatusUnauthorized, "That token is not valid.")
		return
	}
	if !s.openSession(w, r, id, session.WebSession{TokenMAC: sessionMAC(secret)}, triedForm) {
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// openSession opens a signed-in person's web session, whichever way they signed in (format:
// the access log's), from ws's way-specific fields (Via, Auditor, TokenMAC): a random id in an
// HttpOnly, SameSite=Strict cookie (Secure over HTTPS), its hash in SignIns, for sessionAge;
// the sign-in recorded, or the session ended again (nothing unrecorded). false: it answered
// the request with why it could not.
func (s *server) openSession(w http.ResponseWriter, r *http.Request, id Identity, ws session.WebSession, format string) bool {
	value, err := randomToken()
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	ctx := r.Context()
	now := s.now()
	ws.IDHash, ws.Who, ws.CreatedAt, ws.ExpiresAt = sha256.Sum256([]byte(value)), id.Who, now, now.Add(sessionAge)
	if err := s.cfg.SignIns.CreateWebSession(ctx, ws); err != nil {
		s.log.Error().Err(err).Msg("open a sign-in session")
		s.page(w, http.StatusServiceUnavailable, "message", pageData{Title: "Try again", Message: "You cannot be signed in right now. Please try again shortly."})
		return false
	}
	if err := record(context.WithValue(ctx, identityKey{}, id), s.cfg.AccessLog, r,
		access{action: "signin", format: format, status: http.StatusSeeOther}); err != nil {
		s.endSession(ctx, ws.IDHash) // nothing unrecorded: the session goes again
		s.unrecorded(w, err)
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: int(sessionAge / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.https(r)})
	s.clearCookie(w, r, legacyTokenCookie)
	return true
}

// signoutForm answers GET /signout (an old link, a bookmark) with the sign-out button: signing
// out changes state, so it is a POST from the pages themselves.
func (s *server) signoutForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s.page(w, http.StatusOK, "signout", pageData{Title: "Sign out"})
}

// signout ends the browser's sign-in session (its cookie then signs nobody in, anywhere),
// clears the cookies and goes to the sign-in page. The guard has checked that the form came
// from the pages.
func (s *server) signout(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	w.Header().Set("Cache-Control", "no-store")
	who := anonymous
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" && s.cfg.SignIns != nil {
		key := sha256.Sum256([]byte(c.Value))
		if id, ok, err := s.signedIn(ctx, c.Value); err == nil && ok {
			who = id
		}
		if !s.endSession(ctx, key) {
			s.page(w, http.StatusServiceUnavailable, "message", pageData{Title: "Try again", Message: "You cannot be signed out right now. Please try again shortly."})
			return
		}
	} else if id, ok := ctx.Value(signInLinkKey{}).(Identity); ok {
		who = id // a SignIn link's session, ended by SignIn.Wrap
	}
	if err := record(context.WithValue(ctx, identityKey{}, who), s.cfg.AccessLog, r,
		access{action: "signout", status: http.StatusSeeOther}); err != nil {
		s.log.Error().Err(err).Msg("sign-out not recorded") // the session is ended already
	}
	s.clearCookie(w, r, sessionCookie)
	s.clearCookie(w, r, legacyTokenCookie)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// endSession ends a sign-in session, reporting whether that worked (an error is logged).
func (s *server) endSession(ctx context.Context, key [32]byte) bool {
	if _, err := s.cfg.SignIns.EndWebSession(context.WithoutCancel(ctx), key); err != nil {
		s.log.Error().Err(err).Msg("end a sign-in session")
		return false
	}
	return true
}

func (s *server) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.https(r)})
}

// recordFailure records a refused sign-in or sign-out (action) in the access log: who
// "anonymous", via "none", format the credential tried, and the status answered; never the
// credential itself. Best-effort: nothing is shown, so a failure to record is only logged.
func (s *server) recordFailure(r *http.Request, action, tried string, status int) {
	ctx := context.WithValue(context.WithoutCancel(r.Context()), identityKey{}, anonymous)
	if err := record(ctx, s.cfg.AccessLog, r, access{action: action, format: tried, status: status}); err != nil {
		s.log.Error().Err(err).Str("action", action).Msg("refused attempt not recorded")
	}
}
