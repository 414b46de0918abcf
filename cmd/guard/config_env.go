package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// applyEnv applies the GUARD_* overrides; they win over the file.
func (cfg *Config) applyEnv(d *yamlDecoder, getenv func(string) string) {
	envErr := func(name string, err error) {
		d.errs = append(d.errs, &ConfigError{File: name, Msg: err.Error()})
	}
	if v := getenv(envListen); v != "" {
		cfg.Listen = v
		if err := checkListen(v); err != nil {
			envErr(envListen, err)
		}
	}
	if v := getenv(envRedisURL); v != "" {
		cfg.RedisURL = v
		if err := checkURL(v, "redis", "rediss", "unix"); err != nil {
			envErr(envRedisURL, err)
		}
	}
	if v := getenv(envDatabaseURL); v != "" {
		cfg.DatabaseURL = v
		if err := checkURL(v, "postgres", "postgresql"); err != nil {
			envErr(envDatabaseURL, err)
		}
	}
	if v := getenv(envKeySecret); v != "" {
		cfg.KeySecret = v
		if err := checkKeySecret(v); err != nil {
			envErr(envKeySecret, err)
		}
	}
	if v := getenv(envKeyPrefix); v != "" {
		cfg.KeyPrefix = v
		if err := checkKeyPrefix(v); err != nil {
			envErr(envKeyPrefix, err)
		}
	}
	if v := getenv(envSpoolDir); v != "" {
		cfg.Audit.SpoolDir = v
	}
	if v := getenv(envInstance); v != "" {
		cfg.Instance = v
		if !actionNameRE.MatchString(v) {
			envErr(envInstance, fmt.Errorf("%q: use letters, digits, _ . - (at most 64)", v))
		}
	}
}

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host != "" && net.ParseIP(host) == nil && !hostNameRE.MatchString(host) {
		return fmt.Errorf("%q: bad host", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: bad port", addr)
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
	if !contains(schemes, u.Scheme) {
		return fmt.Errorf("scheme must be one of %s", strings.Join(schemes, ", "))
	}
	if u.Scheme != "unix" && u.Host == "" {
		return errors.New("the URL has no host")
	}
	return nil
}

var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

func checkKeyPrefix(p string) error {
	if !keyPrefixRE.MatchString(p) {
		return fmt.Errorf("%q: use 1 to 64 of letters, digits and _ . : -", p)
	}
	return nil
}

// weakKeySecret is the length below which serve warns about key_secret: a
// short secret makes the hashes of low-entropy identifiers such as phone
// numbers guessable. Shorter ones are still accepted (API.md's own example
// is "change-me"), loudly.
const weakKeySecret = 16

func checkKeySecret(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty (e.g. openssl rand -hex 32)")
	}
	return nil
}
