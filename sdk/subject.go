package sdk

// Subject names who makes an attempt, without pointers: an empty field is
// absent from the request (its rules are not evaluated). At least one
// field must be set.
type Subject struct {
	// User is the account identifier as the caller knows it (e-mail,
	// phone, username); Guard normalises it.
	User string
	// IP is the client address (see IPExtractor behind proxies).
	IP string
	// Device is an opaque client id, e.g. a device cookie.
	Device string
	// Phone is a phone number (E.164, or national in the server's
	// phone.default_region), e.g. the destination of an OTP.
	Phone string
}

// Check is the check request of s for action.
func (s Subject) Check(action string) CheckRequest {
	return CheckRequest{Action: action, User: opt(s.User), IP: opt(s.IP), Device: opt(s.Device), Phone: opt(s.Phone)}
}

// Report is the report of s for action with outcome (OutcomeSuccess or
// OutcomeFailure). check is the check answer the report closes: its
// DecisionID is passed on unless it is nil or Bypassed.
func (s Subject) Report(action, outcome string, check *CheckResponse) ReportRequest {
	r := ReportRequest{Action: action, User: opt(s.User), IP: opt(s.IP), Device: opt(s.Device), Phone: opt(s.Phone), Outcome: outcome}
	if check != nil && !check.Bypassed {
		r.DecisionID = check.DecisionID
	}
	return r
}

// String returns a pointer to s, for the identifier fields of the wire
// types.
func String(s string) *string { return &s }

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
