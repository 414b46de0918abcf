package config

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/notify"
)

func TestParseNotifications(t *testing.T) {
	y := "audit: {spool_dir: /var/lib/guard/spool}\n" +
		"notifications: {webhook_url: \"https://app.example.com/hooks/guard\", secret: s3cret,\n" +
		"                events: [unlock], timeout: 3s}\n"
	cfg, err := Parse("guard.yaml", []byte(y), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notify
	if n.WebhookURL != "https://app.example.com/hooks/guard" || n.Secret != "s3cret" || !slices.Equal(n.Events, []string{"unlock"}) ||
		n.Timeout != 3*time.Second || n.SpoolDir != filepath.Join("/var/lib/guard/spool", notify.DefaultSpoolSubdir) {
		t.Errorf("Notify = %+v", n)
	}

	// Without the section: off, the spool beside the audit spool.
	cfg, err = Parse("", nil, envMap(map[string]string{EnvSpoolDir: "/s"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.WebhookURL != "" || cfg.Notify.SpoolDir != "/s/notifications" {
		t.Errorf("default Notify = %+v, want off with spool /s/notifications", cfg.Notify)
	}

	// The secret from the environment wins and satisfies the requirement.
	y = "notifications: {webhook_url: \"http://127.0.0.1:9/h\", spool_dir: /n}\n"
	cfg, err = Parse("guard.yaml", []byte(y), envMap(map[string]string{EnvNotificationsSecret: "from-env"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.Secret != "from-env" || cfg.Notify.SpoolDir != "/n" {
		t.Errorf("Notify = %+v, want the secret from %s and spool /n", cfg.Notify, EnvNotificationsSecret)
	}
	if err := cfg.Notify.Settings.Validate(); err != nil {
		t.Errorf("parsed settings do not validate: %v", err)
	}
	// Other warnings (no api_keys in this file) are not this test's.
	secretWarnings := func(ws []Warning) []Warning {
		var out []Warning
		for _, w := range ws {
			if strings.Contains(w.Msg, "NOTIFICATION SECRET") {
				out = append(out, w)
			}
		}
		return out
	}
	if ws := secretWarnings(cfg.Warnings); len(ws) != 1 || !strings.Contains(ws[0].Msg, "SHORT NOTIFICATION SECRET") || ws[0].Where != EnvNotificationsSecret {
		t.Errorf("warnings = %+v, want one about the 8-byte secret", cfg.Warnings)
	}
	cfg, err = Parse("guard.yaml", []byte(y), envMap(map[string]string{EnvNotificationsSecret: "0123456789abcdef0123"}))
	if err != nil || len(secretWarnings(cfg.Warnings)) != 0 {
		t.Errorf("a 20-byte secret: warnings %+v, err %v; want none about the secret", cfg.Warnings, err)
	}
}

func TestParseNotificationsRejects(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		want string
	}{
		{"scheme", "notifications:\n  webhook_url: ftp://x/y\n  secret: s\n", 2, "notifications.webhook_url"},
		{"no secret", "notifications:\n  webhook_url: https://x/y\n", 2, "notifications.secret is required"},
		{"empty secret", "notifications:\n  webhook_url: https://x/y\n  secret: \"\"\n", 2, "notifications.secret is required"},
		{"event", "notifications:\n  events:\n    - lockout\n    - strike\n", 4, `unknown event "strike"`},
		{"no events", "notifications:\n  events: []\n", 2, "at least one"},
		{"timeout", "notifications:\n  timeout: 0s\n", 2, "at least 1ms"},
		{"unknown key", "notifications:\n  url: https://x/y\n", 2, `unknown key "url"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("guard.yaml", []byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want line %d: %s", tt.yaml, tt.line, tt.want)
			}
			prefix := "guard.yaml:" + strconv.Itoa(tt.line) + ": "
			found := false
			for _, line := range strings.Split(err.Error(), "\n") {
				found = found || strings.HasPrefix(line, prefix) && strings.Contains(line, tt.want)
			}
			if !found {
				t.Errorf("error = %q, want a line starting %q containing %q", err, prefix, tt.want)
			}
		})
	}
}
