package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/logbook/logbook/bot/web"
)

// oidcConfig is the web pages' OpenID Connect sign-in (LOGBOOK_OIDC_*); nil in serveConfig
// when LOGBOOK_OIDC_ISSUER is unset.
type oidcConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret Secret
	RedirectURL  string
	Scopes       []string
	UserClaim    string
	GroupsClaim  string
	Roles        map[string]web.Role
}

// readOIDC reads LOGBOOK_OIDC_*: with an issuer, the client id and secret and a role mapping
// are required; the redirect URL defaults to LOGBOOK_PUBLIC_URL's /oidc/callback.
func (cfg *serveConfig) readOIDC(e env) error {
	issuer := strings.TrimSpace(e.getenv("LOGBOOK_OIDC_ISSUER"))
	if issuer == "" {
		for _, n := range []string{"LOGBOOK_OIDC_CLIENT_ID", "LOGBOOK_OIDC_CLIENT_SECRET", "LOGBOOK_OIDC_ROLES", "LOGBOOK_OIDC_REDIRECT_URL"} {
			if strings.TrimSpace(e.getenv(n)) != "" {
				return fmt.Errorf("%s is set but LOGBOOK_OIDC_ISSUER is not: set the provider's issuer URL too", n)
			}
		}
		return nil
	}
	o := &oidcConfig{Issuer: issuer, ClientID: strings.TrimSpace(e.getenv("LOGBOOK_OIDC_CLIENT_ID")),
		ClientSecret: Secret(strings.TrimSpace(e.getenv("LOGBOOK_OIDC_CLIENT_SECRET"))),
		RedirectURL:  strings.TrimSpace(e.getenv("LOGBOOK_OIDC_REDIRECT_URL")),
		UserClaim:    strings.TrimSpace(e.getenv("LOGBOOK_OIDC_USER_CLAIM")), GroupsClaim: strings.TrimSpace(e.getenv("LOGBOOK_OIDC_GROUPS_CLAIM"))}
	if !secureURL(issuer) {
		return fmt.Errorf("LOGBOOK_OIDC_ISSUER=%q: want the provider's https issuer URL (e.g. https://accounts.google.com; http only on loopback)", issuer)
	}
	if o.ClientID == "" || o.ClientSecret == "" {
		return errors.New("LOGBOOK_OIDC_ISSUER needs LOGBOOK_OIDC_CLIENT_ID and LOGBOOK_OIDC_CLIENT_SECRET (the client registered with the provider)")
	}
	if o.RedirectURL == "" && cfg.Footer.PublicURL != "" {
		o.RedirectURL = strings.TrimSuffix(cfg.Footer.PublicURL, "/") + "/oidc/callback"
	}
	if u, err := url.Parse(o.RedirectURL); o.RedirectURL == "" || err != nil || !secureURL(o.RedirectURL) || u.Path != strings.TrimSuffix(u.Path, "/") ||
		!strings.HasSuffix(u.Path, "/oidc/callback") {
		return fmt.Errorf("LOGBOOK_OIDC_REDIRECT_URL=%q: want the pages' external https address with the path /oidc/callback "+
			"(e.g. https://logbook.example.com/oidc/callback; it defaults to LOGBOOK_PUBLIC_URL's), registered with the provider", o.RedirectURL)
	}
	roles, err := web.ParseRoles(e.getenv("LOGBOOK_OIDC_ROLES"))
	if err != nil {
		return fmt.Errorf("LOGBOOK_OIDC_ROLES: %w", err)
	}
	if len(roles) == 0 {
		return errors.New("LOGBOOK_OIDC_ROLES is required with LOGBOOK_OIDC_ISSUER: which groups may read (group=reader) and audit " +
			"(group=auditor), e.g. logbook-readers=reader,security=auditor (*=reader for everyone the provider signs in)")
	}
	o.Roles = roles
	for _, s := range strings.FieldsFunc(e.getenv("LOGBOOK_OIDC_SCOPES"), func(r rune) bool { return r == ',' || r == ' ' }) {
		if s != "openid" {
			o.Scopes = append(o.Scopes, s)
		}
	}
	cfg.OIDC = o
	return nil
}

// secureURL reports an https URL, or an http one on loopback.
func secureURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return u.Scheme == "http" && (u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback()))
}

// web is the pages' configuration of it.
func (o *oidcConfig) web() *web.OIDC {
	if o == nil {
		return nil
	}
	return &web.OIDC{Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret.Reveal(), RedirectURL: o.RedirectURL,
		Scopes: o.Scopes, UserClaim: o.UserClaim, GroupsClaim: o.GroupsClaim, Roles: o.Roles,
		HTTPClient: &http.Client{Timeout: 10 * time.Second}}
}

// signInError is /readyz's reason when the OIDC provider has not been discovered: the pages
// would refuse every sign-in.
type signInError struct{ err error }

func (e signInError) Error() string {
	return "OIDC sign-in is not ready: " + e.err.Error() + " (retrying)"
}

func (e signInError) Unwrap() error { return e.err }

// signInReadiness is ready, then unready while d's provider has not been discovered.
func signInReadiness(ready func(context.Context) error, d *web.Discovery) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ready(ctx); err != nil {
			return err
		}
		if err := d.Err(); err != nil {
			return signInError{err}
		}
		return nil
	}
}
