package abuse

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/nyaruka/phonenumbers"
)

// Phone numbers: the `phone` identifier and the dimensions derived from it
// (phone, phone_country, phone_prefix), parsed with libphonenumber's rules
// (github.com/nyaruka/phonenumbers, the Go port of Google's library).

// Phone settings bounds and defaults.
const (
	// DefaultPrefixDigits is how many digits of the E.164 number (after
	// the '+') make its phone_prefix: 6 is the country code plus the
	// leading digits of the national number that name a range allocated
	// to one operator (+447400 for +447400123456), the unit SMS pumping
	// attacks rotate numbers within.
	DefaultPrefixDigits = 6
	// MinPrefixDigits and MaxPrefixDigits bound phone.prefix_digits: an
	// E.164 number has at most 15 digits.
	MinPrefixDigits = 1
	MaxPrefixDigits = 15
	// NonGeoRegion is the region libphonenumber gives numbers of the
	// non-geographic country calling codes (+800, +808, +870, +881, +882,
	// +883, +888, +979): their phone_country, and a value lists accept
	// beside the ISO 3166 regions (international premium and satellite
	// ranges are classic SMS pumping destinations).
	NonGeoRegion = "001"
)

// PhoneConfig is the `phone` section: how phone numbers are read.
type PhoneConfig struct {
	// DefaultRegion is the ISO 3166 region (e.g. "GB") that national
	// numbers ("07400 123456") are read in; "" accepts only numbers in
	// international form ("+44 7400 123456").
	DefaultRegion string
	// PrefixDigits is the number of digits of the E.164 number that form
	// its phone_prefix, MinPrefixDigits..MaxPrefixDigits; 0 means
	// DefaultPrefixDigits.
	PrefixDigits int
}

// validate fills the defaults and checks the settings.
func (c *PhoneConfig) validate() error {
	if c.PrefixDigits == 0 {
		c.PrefixDigits = DefaultPrefixDigits
	}
	if c.PrefixDigits < MinPrefixDigits || c.PrefixDigits > MaxPrefixDigits {
		return fmt.Errorf("phone prefix_digits %d outside %d..%d", c.PrefixDigits, MinPrefixDigits, MaxPrefixDigits)
	}
	if c.DefaultRegion != "" {
		r, ok := NormalizeRegion(c.DefaultRegion)
		if !ok || r == NonGeoRegion {
			return fmt.Errorf("phone default_region %q is not an ISO 3166 region libphonenumber knows (e.g. GB, US, DE)", c.DefaultRegion)
		}
		c.DefaultRegion = r
	}
	return nil
}

// NormalizeRegion returns the upper-case form of an ISO 3166-1 alpha-2
// region code that libphonenumber has numbering metadata for (or
// NonGeoRegion), and whether it is one.
func NormalizeRegion(s string) (string, bool) {
	r := strings.ToUpper(strings.TrimSpace(s))
	if r == NonGeoRegion {
		return r, true
	}
	if len(r) != 2 {
		return "", false
	}
	if _, ok := phonenumbers.GetSupportedRegions()[r]; !ok {
		return "", false
	}
	return r, true
}

// phoneID is a parsed phone number with its derived dimensions.
type phoneID struct {
	e164    string // "+447400123456"
	country string // "GB", or NonGeoRegion
	prefix  string // "+447400"
}

// ParsePhone parses a phone number as a request carries it: E.164 or
// any international form libphonenumber reads ("+44 (0)7400-123 456",
// full-width digits, a "tel:" URI, an extension, which is dropped), or a
// national number read in defaultRegion ("" accepts international form
// only). The number must be *valid* in libphonenumber's metadata (its
// length and leading digits match a range of its region), not merely
// possible (plausible in length): an OTP sent to an unallocated range
// reaches no one, and counting such numbers would only let an attacker
// spread his attempts over keys no real user has. It returns the E.164
// form, the region (ISO 3166, or NonGeoRegion) and the prefix of
// prefixDigits digits. Errors are *InputError with field "phone".
func ParsePhone(raw, defaultRegion string, prefixDigits int) (e164, country, prefix string, err error) {
	p, err := parsePhone(raw, defaultRegion, prefixDigits)
	return p.e164, p.country, p.prefix, err
}

func parsePhone(raw, defaultRegion string, prefixDigits int) (phoneID, error) {
	if err := checkText("phone", raw); err != nil {
		return phoneID{}, err
	}
	bad := func(msg string) (phoneID, error) {
		return phoneID{}, &InputError{Code: CodeInvalidRequest, Field: "phone", Message: msg}
	}
	if strings.TrimSpace(raw) == "" {
		return bad("phone is empty")
	}
	// libphonenumber takes spaces and no-break spaces between digits but
	// not tabs or line breaks; any white space is a separator here.
	n, err := phonenumbers.Parse(strings.Map(spaceToBlank, raw), defaultRegion)
	switch {
	case errors.Is(err, phonenumbers.ErrInvalidCountryCode) && defaultRegion == "" && !strings.ContainsAny(raw, "+＋"):
		return bad("phone must be in international form (+ and the country code) unless phone.default_region is set")
	case errors.Is(err, phonenumbers.ErrInvalidCountryCode):
		return bad("phone has an unknown country calling code")
	case errors.Is(err, phonenumbers.ErrTooShortNSN), errors.Is(err, phonenumbers.ErrTooShortAfterIDD):
		return bad("phone is too short to be a phone number")
	case errors.Is(err, phonenumbers.ErrNumTooLong):
		return bad("phone is too long to be a phone number")
	case err != nil:
		return bad("phone is not a phone number")
	}
	// IsValidNumber is exactly these two calls; finding the region is
	// half of its cost (a regex walk over the calling code's regions), so
	// it is done once.
	region := phonenumbers.GetRegionCodeForNumber(n)
	if region == "" || region == "ZZ" || !phonenumbers.IsValidNumberForRegion(n, region) {
		switch phonenumbers.IsPossibleNumberWithReason(n) {
		case phonenumbers.TOO_SHORT:
			return bad("phone is too short for a number of its country")
		case phonenumbers.TOO_LONG:
			return bad("phone is too long for a number of its country")
		case phonenumbers.INVALID_COUNTRY_CODE:
			return bad("phone has an unknown country calling code")
		}
		return bad("phone is not a valid number (no such range in its country's numbering plan)")
	}
	e164 := phonenumbers.Format(n, phonenumbers.E164)
	return phoneID{e164: e164, country: region, prefix: phonePrefix(e164, prefixDigits)}, nil
}

func spaceToBlank(r rune) rune {
	if unicode.IsSpace(r) {
		return ' '
	}
	return r
}

// phonePrefix is "+" and the first digits of an E.164 number, the whole
// number when it is shorter.
func phonePrefix(e164 string, digits int) string {
	if len(e164) <= 1+digits {
		return e164
	}
	return e164[:1+digits]
}

// NormalizePhone returns the E.164 form of a phone number read with the
// Guard's phone settings, as requests are; errors as ParsePhone.
func (g *Guard) NormalizePhone(raw string) (string, error) {
	p, err := parsePhone(raw, g.cfg.Phone.DefaultRegion, g.cfg.Phone.PrefixDigits)
	return p.e164, err
}

// identify normalises a subject's identifiers, the phone number with the
// Guard's phone settings; it requires none of them.
func (g *Guard) identify(s Subject) (identity, error) {
	id, err := normalizeSubject(s, g.cfg.IPv6Prefix)
	if err != nil || s.Phone == nil {
		return id, err
	}
	p, err := parsePhone(*s.Phone, g.cfg.Phone.DefaultRegion, g.cfg.Phone.PrefixDigits)
	if err != nil {
		return id, err
	}
	id.phone, id.hasPhone = p, true
	return id, nil
}

// phoneKeyOf reads the phone_country or phone_prefix value an admin
// request names directly (Subject.PhoneCountry, Subject.PhonePrefix), for
// dimension d; ok is false when the request names none. Errors are
// *InputError with field "phone_country" or "phone_prefix".
func (g *Guard) phoneKeyOf(d dimIndex, s Subject) (phoneID, bool, error) {
	switch {
	case d == dimPhoneCountry && s.PhoneCountry != nil:
		r, ok := NormalizeRegion(*s.PhoneCountry)
		if !ok {
			return phoneID{}, false, &InputError{Code: CodeInvalidRequest, Field: "phone_country",
				Message: "phone_country must be an ISO 3166 region with a numbering plan (e.g. GB), or " + NonGeoRegion}
		}
		return phoneID{country: r}, true, nil
	case d == dimPhonePrefix && s.PhonePrefix != nil:
		p := *s.PhonePrefix
		if !validPrefix(p, g.cfg.Phone.PrefixDigits) {
			return phoneID{}, false, &InputError{Code: CodeInvalidRequest, Field: "phone_prefix",
				Message: fmt.Sprintf("phone_prefix must be + and 1 to %d digits (phone.prefix_digits), e.g. +447400", g.cfg.Phone.PrefixDigits)}
		}
		return phoneID{prefix: p}, true, nil
	}
	return phoneID{}, false, nil
}

// validPrefix reports whether p is "+" and 1 to digits ASCII digits, the
// form of a phone_prefix (shorter only for numbers shorter than digits).
func validPrefix(p string, digits int) bool {
	if len(p) < 2 || len(p) > 1+digits || p[0] != '+' || p[1] == '0' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// isPhoneDim reports whether d is one of the dimensions of a phone number.
func isPhoneDim(d dimIndex) bool {
	return d == dimPhone || d == dimPhoneCountry || d == dimPhonePrefix
}

// phoneValue is the value dimension d (a phone dimension) keys on.
func (id *identity) phoneValue(d dimIndex) string {
	switch d {
	case dimPhoneCountry:
		return id.phone.country
	case dimPhonePrefix:
		return id.phone.prefix
	}
	return id.phone.e164
}
