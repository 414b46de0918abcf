package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// The checks of values whose type alone does not say enough.

// instanceRE keeps instance names safe in metrics labels and logs.
var instanceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// headerNameRE is RFC 9110's token.
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s is not host:port", quote(addr))
	}
	if host != "" && net.ParseIP(host) == nil && !hostNameRE.MatchString(host) {
		return fmt.Errorf("%s: bad host", quote(addr))
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s: bad port", quote(addr))
	}
	return nil
}

// checkAddr checks a Redis node's host:port.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%s is not host:port", quote(addr))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s: bad port", quote(addr))
	}
	return nil
}

var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// checkURL checks the scheme and shape of a URL without echoing it: a
// database or Redis URL may hold a password.
func checkURL(raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		return fmt.Errorf("scheme must be one of %s", strings.Join(schemes, ", "))
	}
	if u.Scheme != "unix" && u.Host == "" {
		return errors.New("the URL has no host")
	}
	// url.Parse takes any digits for a port; a dial would fail on every
	// attempt, leaving Guard degraded (or without its audit trail) for good.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s outside 1..65535", bare(p))
		}
	}
	return nil
}

var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

func checkKeyPrefix(p string) error {
	if !keyPrefixRE.MatchString(p) {
		return fmt.Errorf("%s: use 1 to 64 of letters, digits and _ . : - (no braces: keys carry their Redis Cluster hash tag after it)", quote(p))
	}
	return nil
}
