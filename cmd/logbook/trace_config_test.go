package main

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/logbook/logbook/bot/web"
)

// Tracing is off unless an OTLP endpoint is set (and then off again with OTEL_SDK_DISABLED or
// OTEL_TRACES_EXPORTER=none); off, serve's parts get a no-op tracer provider. Bad values are
// refused by name.
func TestConfigTracing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars    map[string]string
		on      bool
		content bool
	}{
		{map[string]string{}, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces", "LOGBOOK_TRACE_CONTENT": "on"}, true, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false, false},
	} {
		vars := baseVars()
		for k, v := range tc.vars {
			vars[k] = v
		}
		cfg, err := load(vars)
		if err != nil {
			t.Fatalf("%v: %v", tc.vars, err)
		}
		if on := cfg.Tracing.Endpoint != ""; on != tc.on || cfg.Tracing.Content != tc.content {
			t.Errorf("%v: tracing %+v, want on %v content %v", tc.vars, cfg.Tracing, tc.on, tc.content)
		}
	}
	tp, stop, err := startTracing(context.Background(), tracingConfig{})
	if _, ok := tp.(noop.TracerProvider); err != nil || !ok || stop(context.Background()) != nil {
		t.Errorf("tracing off: provider %T, %v; want the no-op provider", tp, err)
	}
	for name, value := range map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon", "OTEL_TRACES_EXPORTER": "zipkin",
		"LOGBOOK_TRACE_CONTENT": "sometimes"} {
		vars := baseVars()
		vars["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4318"
		vars[name] = value
		if _, err := load(vars); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming it", name, value, err)
		}
	}
}

// OIDC settings: all or nothing, the redirect URL from LOGBOOK_PUBLIC_URL by default, the role
// mapping required; the client secret never prints.
func TestConfigOIDC(t *testing.T) {
	t.Parallel()
	vars := baseVars()
	for k, v := range map[string]string{"LOGBOOK_PUBLIC_URL": "https://logbook.example.com", "LOGBOOK_OIDC_ISSUER": "https://sso.example.com/realms/acme",
		"LOGBOOK_OIDC_CLIENT_ID": "logbook", "LOGBOOK_OIDC_CLIENT_SECRET": "s3cr3t-value", "LOGBOOK_OIDC_ROLES": "eng=reader,sec=auditor",
		"LOGBOOK_OIDC_SCOPES": "openid email groups", "LOGBOOK_OIDC_GROUPS_CLAIM": "realm_access.roles"} {
		vars[k] = v
	}
	cfg, err := load(vars)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.OIDC.web()
	if o == nil || o.RedirectURL != "https://logbook.example.com/oidc/callback" || o.Roles["sec"] != web.RoleAuditor ||
		strings.Join(o.Scopes, " ") != "email groups" || o.GroupsClaim != "realm_access.roles" || o.ClientSecret != "s3cr3t-value" {
		t.Errorf("OIDC: %+v", o)
	}
	if s := strings.Join([]string{cfg.OIDC.ClientSecret.String()}, ""); strings.Contains(s, "s3cr3t") {
		t.Errorf("the client secret prints as %q", s)
	}
	for name, value := range map[string]string{"LOGBOOK_OIDC_ISSUER": "sso.example.com", "LOGBOOK_OIDC_CLIENT_SECRET": "",
		"LOGBOOK_OIDC_ROLES": "", "LOGBOOK_OIDC_REDIRECT_URL": "http://logbook.example.com/oidc/callback"} {
		bad := map[string]string{}
		for k, v := range vars {
			bad[k] = v
		}
		bad[name] = value
		if _, err := load(bad); err == nil || !strings.Contains(err.Error(), "LOGBOOK_OIDC_") {
			t.Errorf("%s=%q: %v, want an error naming the setting", name, value, err)
		}
	}
	only := baseVars()
	only["LOGBOOK_OIDC_CLIENT_ID"] = "logbook"
	if _, err := load(only); err == nil || !strings.Contains(err.Error(), "LOGBOOK_OIDC_ISSUER") {
		t.Errorf("a client id without an issuer: %v", err)
	}
}
