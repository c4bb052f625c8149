package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/logbook/logbook/session"
)

// OIDC configures sign-in through the organisation's OpenID Connect provider (Config.OIDC):
// the authorization code flow with PKCE (S256), its state and nonce checked, the ID token
// verified by github.com/coreos/go-oidc against the provider's keys. Who signed in is the
// UserClaim of the ID token; their role comes from the groups in its GroupsClaim (or the
// provider's userinfo, when the ID token has none: its sub must be the ID token's), mapped by
// Roles. A person in no mapped group is refused. A sign-in opens a server-side session like
// the token form's (the SignInStore), for 12 hours or until sign-out; every attempt is
// recorded in the access log.
type OIDC struct {
	Issuer       string // the provider's issuer URL (LOGBOOK_OIDC_ISSUER); discovery is at /.well-known/openid-configuration
	ClientID     string
	ClientSecret string
	// RedirectURL is the callback registered with the provider: the pages' external address
	// with the path /oidc/callback (LOGBOOK_OIDC_REDIRECT_URL).
	RedirectURL string
	// Scopes are asked for beside openid (default email and profile); some providers want
	// one for the groups claim (Okta: groups).
	Scopes []string
	// UserClaim names the person in the access log (default email; an email claim must not
	// be marked unverified). GroupsClaim holds their groups (default groups); a dotted name
	// reaches into an object (Keycloak's realm_access.roles).
	UserClaim   string
	GroupsClaim string
	// Roles maps a group to a role; the group "*" gives a role to anyone the provider signs
	// in. Auditor wins over reader.
	Roles map[string]Role
	// HTTPClient talks to the provider (nil: one with a 10 s timeout).
	HTTPClient *http.Client
	// Discovery finds the provider (nil: one of Issuer through HTTPClient, discovered on first
	// use); share one with /readyz and run it at start (Discovery.Run).
	Discovery *Discovery
}

// Role is what a person signed in through OIDC may do.
type Role string

// Roles: a reader sees the sessions of public channels; an auditor also those of channels
// that became private, and deleted messages.
const (
	RoleReader  Role = "reader"
	RoleAuditor Role = "auditor"
)

// ParseRoles parses a group-to-role mapping, "group=role,..." (roles reader and auditor; the
// group * for everyone the provider signs in): "logbook-readers=reader,sec-audit=auditor".
func ParseRoles(s string) (map[string]Role, error) {
	roles := map[string]Role{}
	// The key=value,… loop of every list setting (LOGBOOK_PRICES, LOGBOOK_BUDGET, …): each checks its own values.
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		group, role, ok := strings.Cut(item, "=")
		group, role = strings.TrimSpace(group), strings.TrimSpace(role)
		if !ok || group == "" || (Role(role) != RoleReader && Role(role) != RoleAuditor) {
			return nil, fmt.Errorf("%q: want group=reader or group=auditor", item)
		}
		if prev, ok := roles[group]; ok && prev != Role(role) {
			return nil, fmt.Errorf("group %q is mapped to both %s and %s", group, prev, role)
		}
		roles[group] = Role(role)
	}
	return roles, nil
}

// oidcSignIn is the server's side of OIDC: the configuration, the provider (discovered on
// first use, then kept) and the MAC that ties sessions to this configuration.
type oidcSignIn struct {
	cfg    OIDC
	client *http.Client
	mac    [32]byte
	disc   *Discovery
}

func newOIDCSignIn(cfg OIDC) (*oidcSignIn, error) {
	if u, err := url.Parse(cfg.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("web: OIDC issuer %q: want the provider's issuer URL, e.g. https://accounts.google.com", cfg.Issuer)
	}
	if u, err := url.Parse(cfg.RedirectURL); err != nil || u.Host == "" || !strings.HasSuffix(u.Path, oidcCallbackPath) {
		return nil, fmt.Errorf("web: OIDC redirect URL %q: want the pages' external address with the path %s", cfg.RedirectURL, oidcCallbackPath)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("web: OIDC needs a client id and a client secret")
	}
	if len(cfg.Roles) == 0 {
		return nil, errors.New("web: OIDC needs a group-to-role mapping: nobody could sign in")
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = "email"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.Scopes == nil {
		cfg.Scopes = []string{"email", "profile"}
	}
	o := &oidcSignIn{cfg: cfg, client: cfg.HTTPClient, disc: cfg.Discovery}
	if o.client == nil {
		o.client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.disc == nil {
		o.disc = NewDiscovery(cfg.Issuer, o.client)
	} else if o.disc.Issuer() != cfg.Issuer {
		return nil, fmt.Errorf("web: OIDC discovery of %q for the issuer %q", o.disc.Issuer(), cfg.Issuer)
	}
	// The sessions hold while the secret and what decides roles are unchanged.
	m := hmac.New(sha256.New, []byte(cfg.ClientSecret))
	fmt.Fprintf(m, "logbook oidc session v1\x00%s\x00%s\x00%s\x00%s", cfg.Issuer, cfg.ClientID, cfg.GroupsClaim, cfg.UserClaim)
	groups := make([]string, 0, len(cfg.Roles))
	for g := range cfg.Roles {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		fmt.Fprintf(m, "\x00%s=%s", g, cfg.Roles[g])
	}
	copy(o.mac[:], m.Sum(nil))
	return o, nil
}

// discover returns the provider, reading its discovery document the first time (and again
// after a failure).
func (o *oidcSignIn) discover(ctx context.Context) (*oidc.Provider, error) {
	return o.disc.Provider(ctx)
}

func (o *oidcSignIn) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: append([]string{oidc.ScopeOpenID}, o.cfg.Scopes...)}
}

// role is the role groups give (auditor wins), and whether they give one.
func (o *oidcSignIn) role(groups []string) (Role, bool) {
	var best Role
	for _, g := range append(slices.Clone(groups), "*") {
		switch o.cfg.Roles[g] {
		case RoleAuditor:
			return RoleAuditor, true
		case RoleReader:
			best = RoleReader
		}
	}
	return best, best != ""
}

// The OIDC routes, the cookie that carries one sign-in's flow from /oidc/login to the
// callback, and how long a flow may take.
const (
	oidcLoginPath    = "/oidc/login"
	oidcCallbackPath = "/oidc/callback"
	oidcFlowCookie   = "logbook_oidc"
	oidcFlowAge      = 10 * time.Minute
	triedOIDC        = "oidc" // access_log.format of OIDC sign-ins
)

// flow is one sign-in's secrets, all derived from the random key its cookie holds: the state
// sent to the provider and checked on return, the nonce the ID token must carry, and the PKCE
// verifier. Without the cookie (HttpOnly, only for /oidc/) none of them can be known.
type flow struct {
	key  []byte
	next string // the local page to return to
}

func (f flow) derive(label string) string {
	m := hmac.New(sha256.New, f.key)
	m.Write([]byte("logbook oidc flow v1 " + label))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (f flow) cookie() string {
	return base64.RawURLEncoding.EncodeToString(f.key) + "." + base64.RawURLEncoding.EncodeToString([]byte(f.next))
}

func parseFlow(value string) (flow, bool) {
	k, n, ok := strings.Cut(value, ".")
	key, err := base64.RawURLEncoding.DecodeString(k)
	next, err2 := base64.RawURLEncoding.DecodeString(n)
	if !ok || err != nil || err2 != nil || len(key) != 32 {
		return flow{}, false
	}
	return flow{key: key, next: localPath(string(next))}, true
}

// localPath is p when it is a path on these pages, else "/": a sign-in never sends the
// browser to another site.
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(p, "//") ||
		strings.HasPrefix(p, "/\\") || strings.HasPrefix(u.Path, "/oidc/") || u.Path == "/signin" || u.Path == "/signout" {
		return "/"
	}
	return u.RequestURI()
}

// oidcLogin starts a sign-in: a fresh flow in its cookie, then the provider's authorization
// endpoint with the flow's state, nonce and PKCE challenge.
func (s *server) oidcLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	p, err := s.oidc.discover(r.Context())
	if err != nil {
		s.log.Error().Err(err).Msg("oidc: sign-in provider unreachable")
		s.recordFailure(r, "signin", triedOIDC, http.StatusServiceUnavailable)
		s.page(w, http.StatusServiceUnavailable, "message", pageData{Title: "Try again",
			Message: "Your organisation's sign-in cannot be reached right now. Please try again shortly."})
		return
	}
	key, err := randomToken()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	raw, _ := base64.RawURLEncoding.DecodeString(key)
	f := flow{key: raw, next: localPath(r.URL.Query().Get("next"))}
	// SameSite=Lax: the provider's redirect back is a cross-site navigation, which a Strict
	// cookie would miss.
	http.SetCookie(w, &http.Cookie{Name: oidcFlowCookie, Value: f.cookie(), Path: "/oidc/", MaxAge: int(oidcFlowAge / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.https(r)})
	http.Redirect(w, r, s.oidc.oauth2(p).AuthCodeURL(f.derive("state"), oidc.Nonce(f.derive("nonce")),
		oauth2.S256ChallengeOption(f.derive("pkce"))), http.StatusSeeOther)
}

// oidcRefusal is why a callback signs nobody in: the status answered, what the person is told,
// what the operator's log says, and who it was when the provider vouched for them.
type oidcRefusal struct {
	status  int
	message string
	reason  string
	who     string
}

func refuse(status int, message, reason string) *oidcRefusal {
	return &oidcRefusal{status: status, message: message, reason: reason}
}

// oidcCallback finishes a sign-in: the flow checked and spent, the code exchanged with its
// PKCE verifier, the ID token verified (signature, issuer, audience, expiry, nonce), the role
// read off the groups; then a session is opened and recorded. The answer is a page that moves
// on to where the person was going: the session cookie is SameSite=Strict, which a browser
// does not send on a redirect that a cross-site navigation started.
func (s *server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	id, next, refused := s.oidcIdentity(w, r)
	if refused != nil {
		s.oidcRefused(w, r, refused)
		return
	}
	if !s.openSession(w, r, id, session.WebSession{Via: "oidc", Auditor: id.Auditor, TokenMAC: s.oidc.mac}, triedOIDC) {
		return
	}
	s.page(w, http.StatusOK, "signedin", pageData{Title: "Signed in", Who: id.Who, Next: next, Refresh: "0;url=" + next,
		Message: "You are signed in as " + id.Who + " (" + roleName(id.Auditor) + ")."})
}

func roleName(auditor bool) string {
	if auditor {
		return string(RoleAuditor)
	}
	return string(RoleReader)
}

// oidcRefused records a refused callback and tells the person why, in a sentence.
func (s *server) oidcRefused(w http.ResponseWriter, r *http.Request, f *oidcRefusal) {
	s.log.Warn().Str("reason", f.reason).Int("status", f.status).Str("who", f.who).Msg("oidc: sign-in refused")
	if f.who == "" {
		s.recordFailure(r, "signin", triedOIDC, f.status)
	} else {
		ctx := context.WithValue(context.WithoutCancel(r.Context()), identityKey{}, Identity{Who: f.who, Via: "oidc"})
		if err := record(ctx, s.cfg.AccessLog, r, access{action: "signin", format: triedOIDC, status: f.status}); err != nil {
			s.log.Error().Err(err).Msg("refused sign-in not recorded")
		}
	}
	s.page(w, f.status, "message", pageData{Title: "Not signed in", Message: f.message})
}

// oidcIdentity checks a callback and returns who signed in, where they were going, or why
// they are refused. The flow's cookie is cleared whatever happens: a flow is used once.
func (s *server) oidcIdentity(w http.ResponseWriter, r *http.Request) (Identity, string, *oidcRefusal) {
	const again = "Signing in did not work. Open the pages again to start over."
	c, err := r.Cookie(oidcFlowCookie)
	http.SetCookie(w, &http.Cookie{Name: oidcFlowCookie, Value: "", Path: "/oidc/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.https(r)})
	if err != nil {
		return Identity{}, "", refuse(http.StatusBadRequest, again+" (This browser started no sign-in, or it took over 10 minutes.)", "no flow cookie")
	}
	f, ok := parseFlow(c.Value)
	q := r.URL.Query()
	if !ok || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.derive("state"))) != 1 {
		return Identity{}, "", refuse(http.StatusBadRequest, again, "state does not match this browser's sign-in")
	}
	if e := q.Get("error"); e != "" {
		return Identity{}, "", refuse(http.StatusUnauthorized, "Your organisation's sign-in did not sign you in ("+clean(e, 64)+").",
			"provider error "+clean(e, 64)+": "+clean(q.Get("error_description"), 200))
	}
	ctx := oidc.ClientContext(r.Context(), s.oidc.client)
	p, err := s.oidc.discover(ctx)
	if err != nil {
		return Identity{}, "", refuse(http.StatusServiceUnavailable, "Your organisation's sign-in cannot be reached right now. Please try again shortly.", err.Error())
	}
	tok, err := s.oidc.oauth2(p).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.derive("pkce")))
	if err != nil {
		return Identity{}, "", refuse(http.StatusUnauthorized, again, "code exchange: "+exchangeError(err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, "", refuse(http.StatusUnauthorized, again, "the token response has no id_token")
	}
	idt, err := p.VerifierContext(ctx, &oidc.Config{ClientID: s.oidc.cfg.ClientID, Now: s.now}).Verify(ctx, raw)
	if err != nil {
		return Identity{}, "", refuse(http.StatusUnauthorized, again, "ID token: "+err.Error())
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.derive("nonce"))) != 1 {
		return Identity{}, "", refuse(http.StatusUnauthorized, again, "ID token nonce does not match this browser's sign-in")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Identity{}, "", refuse(http.StatusUnauthorized, again, "ID token claims: "+err.Error())
	}
	who, reason := s.oidc.person(claims)
	if who == "" {
		return Identity{}, "", refuse(http.StatusForbidden, "Your organisation's sign-in did not say who you are.", reason)
	}
	groups, found := claimStrings(claims, s.oidc.cfg.GroupsClaim)
	if !found && p.UserInfoEndpoint() != "" {
		if info, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok)); err == nil {
			// OpenID Connect Core 5.3.2: the userinfo's sub MUST be the ID token's; an answer
			// about someone else (a faulty provider, tokens mixed up) must not give its groups.
			if info.Subject != idt.Subject {
				return Identity{}, "", refuse(http.StatusUnauthorized,
					"Your organisation's sign-in named two different people for this sign-in, so nobody was signed in. Tell your logbook operator.",
					fmt.Sprintf("userinfo sub %q is not the ID token's %q (the ID token's %s: %s)",
						clean(info.Subject, 200), clean(idt.Subject, 200), s.oidc.cfg.UserClaim, who))
			}
			var more map[string]any
			if info.Claims(&more) == nil {
				groups, found = claimStrings(more, s.oidc.cfg.GroupsClaim)
			}
		}
	}
	role, ok := s.oidc.role(groups)
	if !ok && !found && groupsOverage(claims, s.oidc.cfg.GroupsClaim) {
		// Not "in no allowed group": nobody can tell. logbook does not ask Microsoft Graph
		// (another API and permission); the provider can send fewer groups (docs/web.md).
		r := refuse(http.StatusForbidden, "Your organisation's sign-in sent no groups for "+who+": you are in too many groups for it "+
			"to put them in a sign-in (Entra ID stops at 200), so logbook cannot tell whether you may read these pages. "+
			"Ask your logbook operator to have the sign-in send only the groups assigned to logbook.",
			fmt.Sprintf("groups overage: the ID token names %s in _claim_names instead of sending it (Entra ID past 200 groups); "+
				"have the provider send only the groups assigned to the application", s.oidc.cfg.GroupsClaim))
		r.who = who
		return Identity{}, "", r
	}
	if !ok {
		r := refuse(http.StatusForbidden, "You are signed in as "+who+", but not in a group that may read these pages. Ask your logbook operator.",
			fmt.Sprintf("in no allowed group (%s: %d groups)", s.oidc.cfg.GroupsClaim, len(groups)))
		r.who = who
		return Identity{}, "", r
	}
	return Identity{Who: who, Via: "oidc", Auditor: role == RoleAuditor, browser: true}, f.next, nil
}

// person is who the claims name (UserClaim), or "" and why not. An email claim is believed
// when the provider sends no email_verified (Entra ID sends none), or one that says verified.
func (o *oidcSignIn) person(claims map[string]any) (string, string) {
	who, _ := claims[o.cfg.UserClaim].(string)
	who = strings.TrimSpace(who)
	if who == "" {
		return "", "the ID token has no " + o.cfg.UserClaim + " claim"
	}
	if o.cfg.UserClaim == "email" {
		if v, ok := claims["email_verified"]; ok && !emailVerified(v) {
			return "", clean(fmt.Sprintf("the ID token's email is not verified (email_verified: %#v)", v), 200)
		}
	}
	return clean(who, 320), ""
}

// emailVerified reads an email_verified claim: the boolean true, or the string "true" that
// Cognito and JumpCloud send. Anything else — false, "false", null, 1, "yes" — is not verified.
func emailVerified(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return x == "true"
	}
	return false
}

// groupsOverage reports whether the ID token says its groups claim was left out for want of
// room: past 200 groups Entra ID sends no groups claim but names it in _claim_names (with
// where to read it in _claim_sources; OpenID Connect Core 5.6.2's distributed claims).
func groupsOverage(claims map[string]any, groupsClaim string) bool {
	names, _ := claims["_claim_names"].(map[string]any)
	name, _, _ := strings.Cut(groupsClaim, ".")
	_, ok := names[name]
	return ok
}

// claimStrings reads a claim of strings (a list, or one string) at a dotted path; found is
// false when there is no such claim.
func claimStrings(claims map[string]any, path string) (out []string, found bool) {
	var v any = claims
	for _, name := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	switch x := v.(type) {
	case string:
		return []string{x}, true
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out, true
	}
	return nil, true
}

// exchangeError describes a failed code exchange without the response body's secrets: the
// OAuth error code when the provider sent one.
func exchangeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return re.ErrorCode
		}
		if re.Response != nil {
			return re.Response.Status
		}
	}
	return "no answer from the provider"
}
