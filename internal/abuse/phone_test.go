package abuse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

func TestParsePhone(t *testing.T) {
	tests := []struct {
		name, raw, region   string
		digits              int
		e164, country, pref string // e164 "" means 400 field phone
	}{
		{"E.164", "+447400123456", "", 6, "+447400123456", "GB", "+447400"},
		{"spaces and punctuation", " +44 (0)7400-123.456 ", "", 6, "+447400123456", "GB", "+447400"},
		{"odd spacing", "+44  7400\t123 456", "", 6, "+447400123456", "GB", "+447400"},
		{"full-width digits and plus", "＋４４７４００１２３４５６", "", 6, "+447400123456", "GB", "+447400"},
		{"tel URI", "tel:+44-7400-123456", "", 6, "+447400123456", "GB", "+447400"},
		{"extension dropped", "+44 7400 123456 ext. 12", "", 6, "+447400123456", "GB", "+447400"},
		{"national with default region", "07400 123456", "GB", 6, "+447400123456", "GB", "+447400"},
		{"international despite default region", "+33 6 12 34 56 78", "GB", 6, "+33612345678", "FR", "+336123"},
		{"US fixed line or mobile", "+1 201-555-0123", "", 6, "+12015550123", "US", "+120155"},
		{"US toll free, vanity letters", "+1-800-FLOWERS", "", 6, "+18003569377", "US", "+180035"},
		{"UK fixed line", "+44 20 7946 0018", "", 6, "+442079460018", "GB", "+442079"},
		{"German mobile", "+49 1512 3456789", "", 6, "+4915123456789", "DE", "+491512"},
		{"non-geographic", "+800 1234 5678", "", 6, "+80012345678", NonGeoRegion, "+800123"},
		{"prefix digits 4", "+447400123456", "", 4, "+447400123456", "GB", "+4474"},
		{"prefix longer than the number", "+447400123456", "", 15, "+447400123456", "GB", "+447400123456"},
		{"national without default region", "07400 123456", "", 6, "", "", ""},
		{"no-break space", "+44\u00a07400\u2009123456", "", 6, "+447400123456", "GB", "+447400"},
		{"Guernsey shares +44", "+44 7911 123456", "", 6, "+447911123456", "GG", "+447911"},
		{"possible but not valid (no such US area code)", "+1 999 555 0123", "", 6, "", "", ""},
		{"possible but not valid (UK drama range)", "+44 7700 900123", "", 6, "", "", ""},
		{"too short", "+44740012345", "", 6, "", "", ""},
		{"too long", "+4474001234567", "", 6, "", "", ""},
		{"two digits", "12", "GB", 6, "", "", ""},
		{"unknown country code", "+999 123456", "", 6, "", "", ""},
		{"letters", "call me", "", 6, "", "", ""},
		{"empty", "", "", 6, "", "", ""},
		{"white space", "   ", "GB", 6, "", "", ""},
		{"NUL", "+447400\x00123456", "", 6, "", "", ""},
		{"invalid UTF-8", "+44740\xff0123456", "", 6, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e164, country, prefix, err := ParsePhone(tt.raw, tt.region, tt.digits)
			if tt.e164 == "" {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != "phone" || ie.Code != CodeInvalidRequest {
					t.Fatalf("ParsePhone(%q, %q) = %q, %v; want an invalid_request error on field phone", tt.raw, tt.region, e164, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePhone(%q, %q): %v", tt.raw, tt.region, err)
			}
			if got, want := [3]string{e164, country, prefix}, [3]string{tt.e164, tt.country, tt.pref}; got != want {
				t.Errorf("ParsePhone(%q, %q, %d) = %q; want %q", tt.raw, tt.region, tt.digits, got, want)
			}
		})
	}
}

func TestParsePhoneMessages(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"+1 201 55", "too short"},
		{"+4474001234567890", "too long"},
		{"+1 999 555 0123", "no such range"},
		{"07400 123456", "international form"},
		{"call me", "not a phone number"},
	}
	for _, tt := range tests {
		_, _, _, err := ParsePhone(tt.raw, "", DefaultPrefixDigits)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParsePhone(%q) = %v; want a message with %q", tt.raw, err, tt.want)
		}
	}
}

func TestPhoneConfigValidate(t *testing.T) {
	tests := []struct {
		name       string
		in         PhoneConfig
		want       PhoneConfig
		wantErrSub string
	}{
		{"defaults", PhoneConfig{}, PhoneConfig{PrefixDigits: DefaultPrefixDigits}, ""},
		{"lower-case region", PhoneConfig{DefaultRegion: "gb", PrefixDigits: 5}, PhoneConfig{DefaultRegion: "GB", PrefixDigits: 5}, ""},
		{"unknown region", PhoneConfig{DefaultRegion: "XX"}, PhoneConfig{}, "default_region"},
		{"alpha-3 region", PhoneConfig{DefaultRegion: "GBR"}, PhoneConfig{}, "default_region"},
		{"non-geographic is no default region", PhoneConfig{DefaultRegion: NonGeoRegion}, PhoneConfig{}, "default_region"},
		{"prefix digits too many", PhoneConfig{PrefixDigits: 16}, PhoneConfig{}, "prefix_digits"},
		{"prefix digits negative", PhoneConfig{PrefixDigits: -1}, PhoneConfig{}, "prefix_digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			err := got.validate()
			switch {
			case tt.wantErrSub != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSub) {
					t.Errorf("validate(%+v) = %v; want an error about %s", tt.in, err, tt.wantErrSub)
				}
			case err != nil:
				t.Errorf("validate(%+v): %v", tt.in, err)
			case got != tt.want:
				t.Errorf("validate(%+v) = %+v; want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func phoneSubj(phone string) Subject { return Subject{Phone: &phone} }

// phonePolicy limits otp_send by number, prefix and country with small
// limits, and locks numbers that fail otp_verify.
func phonePolicy() Policy {
	return Policy{Actions: map[string]Action{
		"otp_send": {Limits: []Rule{
			{Dimension: DimPhone, Limit: 2, Window: 10 * time.Minute},
			{Dimension: DimPhonePrefix, Limit: 3, Window: time.Hour},
			{Dimension: DimPhoneCountry, Limit: 4, Window: time.Hour},
		}},
		"otp_verify": {
			Failures: []Rule{{Dimension: DimPhone, Limit: 2, Window: 10 * time.Minute}},
			Lockout:  Lockout{Ladder: []time.Duration{time.Minute}},
		},
	}}
}

func TestPhoneRules(t *testing.T) {
	eachBackend(t, testPhoneRules)
}

// TestPhoneRulesOnCluster: on a real three-master Redis Cluster a send
// with a phone spans the slots of the number, its prefix and its country
// (each key tagged by its own hash) and is still one decision.
func TestPhoneRulesOnCluster(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	c, err := limits.NewRedisClient(limits.RedisConfig{Cluster: addrs}, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := limits.NewRedis(c, limits.RedisStoreConfig{})
	t.Cleanup(func() { st.Close() })
	testPhoneRules(t, &backend{name: "cluster", store: st, prefix: "guardtest:" + time.Now().Format("150405.000000") + ":"})
}

func testPhoneRules(t *testing.T, b *backend) {
	g, rec := newGuard(t, b, phonePolicy(), func(c *Config) { c.Phone = PhoneConfig{DefaultRegion: "GB"} })
	send := func(phone string) Decision {
		return mustCheck(t, g, CheckInput{Action: "otp_send", Subject: phoneSubj(phone)})
	}
	// One number, written two ways: one key.
	wantDecision(t, send("+447400123456"), true, ReasonOK)
	wantDecision(t, send("07400 123456"), true, ReasonOK)
	d := send("+44 7400 123456")
	wantDecision(t, d, false, ReasonRateLimited)
	if d.Limits[0].Rule != "otp_send/phone" || d.Limits[0].Dimension != DimPhone {
		t.Errorf("most restrictive rule %+v; want otp_send/phone", d.Limits[0])
	}
	if e := rec.last(t); e.Phone != "+447400123456" || e.User != "" {
		t.Errorf("audit phone %q user %q; want the E.164 number alone", e.Phone, e.User)
	}
	// Another number of the prefix takes its last prefix slot.
	wantDecision(t, send("+447400999888"), true, ReasonOK)
	d = send("+447400555666")
	wantDecision(t, d, false, ReasonRateLimited)
	if d.Limits[0].Rule != "otp_send/phone_prefix" {
		t.Errorf("most restrictive rule %+v; want otp_send/phone_prefix", d.Limits[0])
	}
	// Another prefix of the country takes its last country slot.
	wantDecision(t, send("+447500123456"), true, ReasonOK)
	d = send("+447800123456")
	wantDecision(t, d, false, ReasonRateLimited)
	if d.Limits[0].Rule != "otp_send/phone_country" {
		t.Errorf("most restrictive rule %+v; want otp_send/phone_country", d.Limits[0])
	}
	// Another country is untouched.
	wantDecision(t, send("+33612345678"), true, ReasonOK)
}

func TestPhoneLockout(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, phonePolicy())
		ctx := context.Background()
		fail := ReportInput{Action: "otp_verify", Subject: phoneSubj("+447400123456"), Outcome: OutcomeFailure}
		mustReport(t, g, fail)
		out := mustReport(t, g, fail)
		if out.Lockout == nil || out.Lockout.Dimension != DimPhone {
			t.Fatalf("second failure: lockout %+v; want a phone lockout", out.Lockout)
		}
		d := mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+44 7400 123456")})
		wantDecision(t, d, false, ReasonLockedOut)
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447400123457")}), true, ReasonOK)

		page, err := g.Lockouts(ctx, LockoutFilter{Subject: phoneSubj("+44 7400 123456")})
		if err != nil {
			t.Fatalf("Lockouts: %v", err)
		}
		if len(page.Lockouts) != 1 || page.Lockouts[0].Phone == nil || *page.Lockouts[0].Phone != "+447400123456" ||
			page.Lockouts[0].Dimension != DimPhone || page.Lockouts[0].User != nil {
			t.Fatalf("lockouts by phone = %+v; want the number's lockout", page.Lockouts)
		}
		other, err := g.Lockouts(ctx, LockoutFilter{Subject: phoneSubj("+447400123457")})
		if err != nil || len(other.Lockouts) != 0 {
			t.Errorf("lockouts of another number = %+v, %v; want none", other.Lockouts, err)
		}
		err = g.Unlock(ctx, UnlockInput{Dimension: DimPhone, Subject: phoneSubj("+447400123456"), Reason: "support"})
		if err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447400123456")}), true, ReasonOK)
	})
}

func TestPhoneManualCountryLock(t *testing.T) {
	b := memoryBackend(t)
	g, rec := newGuard(t, b, phonePolicy())
	ctx := context.Background()
	if _, err := g.Lock(ctx, LockInput{Dimension: DimPhoneCountry, Duration: time.Hour}); err == nil {
		t.Fatalf("Lock of phone_country without a phone: no error")
	}
	got, err := g.Lock(ctx, LockInput{Dimension: DimPhoneCountry, Subject: phoneSubj("+447400123456"), Duration: time.Hour, Reason: "pumping"})
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if len(got) != 1 || got[0].PhoneCountry == nil || *got[0].PhoneCountry != "GB" || got[0].Phone != nil {
		t.Fatalf("Lock = %+v; want one entry naming country GB", got)
	}
	if e := rec.last(t); e.Phone != "+447400123456" || e.Action != ActionLock {
		t.Errorf("admin event %+v; want the lock naming the phone", e)
	}
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447800123456")}), false, ReasonLockedOut)
	// +447911 is Guernsey's, another phone_country.
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447911123456")}), true, ReasonOK)
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+33612345678")}), true, ReasonOK)
	page, err := g.Lockouts(ctx, LockoutFilter{Dimension: DimPhoneCountry})
	if err != nil || len(page.Lockouts) != 1 || page.Lockouts[0].PhoneCountry == nil || *page.Lockouts[0].PhoneCountry != "GB" {
		t.Fatalf("lockouts of phone_country = %+v, %v; want GB", page.Lockouts, err)
	}
	// The listing's own value names the key too: unlock by it.
	if err := g.Unlock(ctx, UnlockInput{Dimension: DimPhoneCountry, Subject: Subject{PhoneCountry: sp("gb")}}); err != nil {
		t.Fatalf("Unlock by phone_country: %v", err)
	}
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447800123456")}), true, ReasonOK)
	if _, err := g.Lock(ctx, LockInput{Dimension: DimPhonePrefix, Subject: Subject{PhonePrefix: sp("+447800")}, Duration: time.Hour}); err != nil {
		t.Fatalf("Lock by phone_prefix: %v", err)
	}
	if e := rec.last(t); e.Phone != "+447800" || e.Action != ActionLock {
		t.Errorf("admin event of a lock by prefix: %+v; want phone +447800", e)
	}
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447800123456")}), false, ReasonLockedOut)
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: phoneSubj("+447400123456")}), true, ReasonOK)
	for _, tc := range []struct {
		dim   string
		s     Subject
		field string
	}{
		{DimPhoneCountry, Subject{PhoneCountry: sp("Narnia")}, "phone_country"},
		{DimPhonePrefix, Subject{PhonePrefix: sp("447800")}, "phone_prefix"},
		{DimPhonePrefix, Subject{PhonePrefix: sp("+4478001")}, "phone_prefix"}, // 7 digits, prefix_digits 6
		{DimPhonePrefix, Subject{PhoneCountry: sp("GB")}, "phone"},             // the other dimension's value
		// A phone beside a phone_country or phone_prefix that is not its
		// own names two keys: refused, whatever the dimension.
		{DimPhoneCountry, withPhoneKeys(phoneSubj("+447400123456"), "FR", ""), "phone_country"},
		{DimPhoneCountry, withPhoneKeys(phoneSubj("+447911123456"), "GB", ""), "phone_country"}, // Guernsey
		{DimPhonePrefix, withPhoneKeys(phoneSubj("+447400123456"), "", "+447800"), "phone_prefix"},
		{DimPhonePrefix, withPhoneKeys(phoneSubj("+447400123456"), "", "+4474"), "phone_prefix"},
		{DimPhone, withPhoneKeys(phoneSubj("+447400123456"), "", "+447800"), "phone_prefix"},
		{DimPhonePrefix, withPhoneKeys(phoneSubj("+447400123456"), "FR", "+447400"), "phone_country"},
	} {
		err := g.Unlock(ctx, UnlockInput{Dimension: tc.dim, Subject: tc.s})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("Unlock %s %+v: %v; want field %s", tc.dim, tc.s, err, tc.field)
		}
		if tc.s.Phone == nil {
			continue
		}
		_, err = g.Lock(ctx, LockInput{Dimension: tc.dim, Subject: tc.s, Duration: time.Hour})
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("Lock %s %+v: %v; want field %s", tc.dim, tc.s, err, tc.field)
		}
	}
	// When they agree, both name the one key.
	got, err = g.Lock(ctx, LockInput{Dimension: DimPhoneCountry, Subject: withPhoneKeys(phoneSubj("+447400123456"), "gb", "+447400"), Duration: time.Hour})
	if err != nil || len(got) != 1 || got[0].PhoneCountry == nil || *got[0].PhoneCountry != "GB" {
		t.Fatalf("Lock with a phone and its own country and prefix = %+v, %v; want GB locked", got, err)
	}
	if err := g.Unlock(ctx, UnlockInput{Dimension: DimPhoneCountry, Subject: withPhoneKeys(phoneSubj("+447400123456"), "GB", "")}); err != nil {
		t.Fatalf("Unlock with a phone and its own country: %v", err)
	}
}

func TestCountryLists(t *testing.T) {
	pol := phonePolicy()
	pol.Deny.Countries = []string{"ru", NonGeoRegion}
	pol.Allow.Countries = []string{"GB", "RU"}
	b := memoryBackend(t)
	g, rec := newGuard(t, b, pol)
	tests := []struct {
		phone   string
		allowed bool
		reason  string
	}{
		{"+7 912 345-67-89", false, ReasonDenylisted}, // deny wins over allow
		{"+800 1234 5678", false, ReasonDenylisted},
		{"+447400123456", true, ReasonAllowlisted},
		{"+33612345678", true, ReasonOK},
	}
	for _, tt := range tests {
		d := mustCheck(t, g, CheckInput{Action: "otp_send", Subject: phoneSubj(tt.phone)})
		if d.Allowed != tt.allowed || d.Reason != tt.reason {
			t.Errorf("%s: allowed %v reason %s; want %v %s", tt.phone, d.Allowed, d.Reason, tt.allowed, tt.reason)
		}
		if e := rec.last(t); e.Reason != tt.reason || e.Phone == "" {
			t.Errorf("%s: audit %+v; want reason %s with the phone", tt.phone, e, tt.reason)
		}
	}
	if got := g.Policy().Deny.Countries; len(got) != 2 || got[0] != "RU" {
		t.Errorf("effective deny countries %q; want [RU 001]", got)
	}

	bad := phonePolicy()
	bad.Deny.Countries = []string{"XX", "GBR", ""}
	err := bad.Validate()
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Section != "deny" || pe.Field != "countries" || strings.Count(err.Error(), "countries") < 3 {
		t.Errorf("Validate with bad countries: %v; want three deny countries problems", err)
	}
}

func TestPhonePseudonymized(t *testing.T) {
	b := memoryBackend(t)
	g, rec := newGuard(t, b, phonePolicy(), func(c *Config) { c.Pseudonymize = true })
	mustCheck(t, g, CheckInput{Action: "otp_send", Subject: phoneSubj("+447400123456")})
	e := rec.last(t)
	if e.Phone == "" || strings.Contains(e.Phone, "447400") {
		t.Fatalf("pseudonymized audit phone %q; want a keyed hash", e.Phone)
	}
	got, err := g.AuditPhone("+44 7400 123456")
	if err != nil || got != e.Phone {
		t.Errorf("AuditPhone = %q, %v; want the event's %q", got, err, e.Phone)
	}
	if _, err := g.AuditPhone("07400 123456"); err == nil {
		t.Errorf("AuditPhone of a national number without default region: no error")
	}
}

func TestPhoneKeysDistinct(t *testing.T) {
	k := newKeyer(testSecret, "p:")
	p, err := parsePhone("+447400123456", "", 6)
	if err != nil {
		t.Fatal(err)
	}
	id := identity{phone: p, hasPhone: true, user: "+447400123456", hasUser: true}
	seen := map[string]dimIndex{}
	for _, d := range []dimIndex{dimUser, dimPhone, dimPhoneCountry, dimPhonePrefix} {
		h := k.sum(&id, d)
		if prev, dup := seen[h]; dup {
			t.Errorf("dimension %v hashes like %v", d, prev)
		}
		seen[h] = d
		if got, want := k.key("l:r", &id, d), "p:{"+h+"}l:r"; got != want {
			t.Errorf("key of %v = %q; want %q (tagged by its own hash)", d, got, want)
		}
	}
	// Pseudonyms of full IP addresses keep the hash input they had before
	// the phone dimensions existed.
	if hashTag(dimAddr) != 6 {
		t.Errorf("dimAddr hash tag %d; want 6", hashTag(dimAddr))
	}
}

// Phone numbers on the decision path: parsing alone, and Guard.Check of an
// otp_send with a phone (three phone rules, three more keyed hashes) beside
// the same check by user, on the memory store:
//
//	go test -run '^$' -bench 'Phone' -benchtime=2s ./internal/abuse/
func BenchmarkParsePhone(b *testing.B) {
	for _, raw := range []string{"+447400123456", "+44 (0)7400 123-456", "07400 123456"} {
		b.Run(raw, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parsePhone(raw, "GB", DefaultPrefixDigits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGuardCheckPhone(b *testing.B) {
	pol := Policy{Actions: map[string]Action{"otp_send": {Limits: []Rule{
		{Dimension: DimUser, Limit: MaxRuleLimit, Window: time.Second},
		{Dimension: DimPhone, Limit: MaxRuleLimit, Window: time.Second},
		{Dimension: DimPhonePrefix, Limit: MaxRuleLimit, Window: time.Second},
		{Dimension: DimPhoneCountry, Limit: MaxRuleLimit, Window: time.Second},
	}}}}
	st := limits.NewMemory(limits.MemoryConfig{})
	defer st.Close()
	g, err := New(nil, Config{Policy: pol, KeySecret: testSecret}, st, discardRecorder{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	phones := make([]string, 4096)
	for i := range phones {
		phones[i] = fmt.Sprintf("+4474%08d", 100000+i)
	}
	for _, tc := range []struct {
		name string
		subj func(i int) Subject
	}{
		{"user", func(i int) Subject { return Subject{User: &phones[i%len(phones)]} }},
		{"phone", func(i int) Subject { return Subject{Phone: &phones[i%len(phones)]} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := g.Check(context.Background(), CheckInput{Action: "otp_send", Subject: tc.subj(i)}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// FuzzParsePhone: parsing never panics, and a number's E.164 form is a
// fixed point with the same country and prefix, so the audit trail's
// value (re-read by lockout listings and filters) names the same keys.
func FuzzParsePhone(f *testing.F) {
	for _, s := range []string{"+447400123456", "07400 123456", "＋４４７４００１２３４５６", "+1-800-FLOWERS", "+800 1234 5678", "tel:+44-7400-123456;ext=1", "+44 (0)7400 123-456"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e164, country, prefix, err := ParsePhone(raw, "GB", DefaultPrefixDigits)
		if err != nil {
			return
		}
		e2, c2, p2, err := ParsePhone(e164, "", DefaultPrefixDigits)
		if err != nil || e2 != e164 || c2 != country || p2 != prefix {
			t.Fatalf("ParsePhone(%q) = %q %q %q, but its E.164 parses as %q %q %q, %v", raw, e164, country, prefix, e2, c2, p2, err)
		}
	})
}
