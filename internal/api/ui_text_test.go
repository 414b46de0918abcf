package api

import (
	"strings"
	"testing"
)

func TestIdentHTML(t *testing.T) {
	tests := []struct {
		name, in    string
		want        []string // substrings of the HTML
		notWant     []string
		warn, short bool
	}{
		{name: "plain", in: "alice@example.com", want: []string{`>alice@example.com<`}, notWant: []string{"esc", "warn"}},
		{name: "empty", in: "", want: []string{`class="none"`}},
		{name: "markup escaped", in: `<b onclick="x">&`, want: []string{"&lt;b onclick=&#34;x&#34;&gt;&amp;"}, notWant: []string{"<b"}},
		{name: "bidi override", in: "admin\u202emoc.live@\u202c",
			want:    []string{`<span class="esc" title="RIGHT-TO-LEFT OVERRIDE">\u202E</span>`, `title="POP DIRECTIONAL FORMATTING">\u202C<`, "2 invisible"},
			notWant: []string{"\u202e", "\u202c"}, warn: true},
		{name: "isolates and marks", in: "a\u2066b\u200fc\u061cd", want: []string{`\u2066`, `\u200F`, `\u061C`}, notWant: []string{"\u2066", "\u200f", "\u061c"}, warn: true},
		{name: "zero width and soft hyphen", in: "pay\u200bpal\u00ad", want: []string{`\u200B`, `\u00AD`}, warn: true},
		{name: "controls and odd spaces", in: "a\tb\u00a0c\u3000d\u2028", want: []string{`\u0009`, `\u00A0`, `\u3000`, `\u2028`}, warn: true},
		{name: "invalid UTF-8", in: "a\xffb", want: []string{`\xFF`}, warn: true},
		{name: "tag characters", in: "a\U000e0041", want: []string{`\U000E0041`}, warn: true},
		{name: "confusable in mixed script", in: "p\u0430ypal", want: []string{`<mark class="cf" title="U+0430, not ASCII">а<small>\u0430</small></mark>`, "mixed with ASCII"}, warn: true},
		{name: "one script is no confusion", in: "иван@пример.рф", want: []string{"иван@пример.рф"}, notWant: []string{"<mark", "warn"}},
		{name: "long value truncated, full on demand", in: strings.Repeat("x", 41), want: []string{`<details class="long"><summary>` + strings.Repeat("x", 40) + `<span class="more">… 41 chars</span></summary><span class="full">` + strings.Repeat("x", 41) + `</span>`}},
		{name: "40 characters fit", in: strings.Repeat("é", 40), notWant: []string{"<details"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(identHTML(tt.in))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("identHTML(%q) = %s\nlacks %s", tt.in, got, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("identHTML(%q) = %s\nholds %q", tt.in, got, w)
				}
			}
			if hasWarn := strings.Contains(got, `class="warn"`); hasWarn != tt.warn {
				t.Errorf("identHTML(%q): warning marker %v, want %v", tt.in, hasWarn, tt.warn)
			}
		})
	}
}

func TestPivotHTML(t *testing.T) {
	got := string(pivotHTML("user", "a&b\u202e\"<"))
	if !strings.HasPrefix(got, `<a class="pv" href="/ui/events?user=a%26b%E2%80%AE%22%3C" title="All events with this user">`) {
		t.Errorf("pivot link = %s", got)
	}
}

func TestParseLockDuration(t *testing.T) {
	for in, want := range map[string]string{"1s": "1s", "15m": "15m0s", "6h": "6h0m0s", "7d": "168h0m0s", "30d": "720h0m0s", " 1h ": "1h0m0s"} {
		if d, err := parseLockDuration(in); err != nil || d.String() != want {
			t.Errorf("parseLockDuration(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "0s", "999ms", "31d", "721h", "1w", "d", "-1h", "1.5.d",
		// 213504 days in nanoseconds wrap past 2^63 to about 25 minutes.
		"213504d", "106752d", "-213504d"} {
		if d, err := parseLockDuration(in); err == nil {
			t.Errorf("parseLockDuration(%q) = %v; want an error", in, d)
		}
	}
}
