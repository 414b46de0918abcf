package api

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"unicode"
	"unicode/utf8"
)

// identShort is how many characters of an identifier a table cell shows;
// the rest is behind a <details> toggle.
const identShort = 40

// inertRune reports whether r must never reach the page as itself: bidi
// controls (which reorder what a reviewer reads: "admin\u202Emoc.live@"
// displays as "admin@evil.com"), zero-width and other invisible or format
// characters, controls, and white space other than the ASCII space. Each is
// shown as a visible \uXXXX badge instead.
func inertRune(r rune) bool {
	switch {
	case r == ' ':
		return false
	case r == utf8.RuneError:
		return true
	case unicode.IsControl(r), unicode.Is(unicode.Cf, r), unicode.IsSpace(r),
		unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r), unicode.Is(unicode.Zs, r):
		return true
	case unicode.Is(unicode.Variation_Selector, r), unicode.Is(unicode.Noncharacter_Code_Point, r),
		unicode.Is(unicode.Co, r), unicode.Is(unicode.Cs, r):
		return true
	case r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800: // Hangul fillers, braille blank
		return true
	}
	return false
}

// confusableRune reports whether r is a letter or digit outside ASCII in
// an identifier that also holds ASCII letters: mixed scripts are how
// look-alikes ("pаypal" with a Cyrillic а) pass for someone else. Such
// characters are shown highlighted, with their code point.
func confusableRune(r rune, mixed bool) bool {
	return mixed && r > unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r))
}

// identHTML renders an identifier so that nothing in it can fool the
// reader: every character escaped, inert characters as badges, confusable
// ones highlighted, the text isolated from its surroundings' direction,
// and, past identShort characters, a truncated view with the full value
// one click away.
func identHTML(s string) template.HTML {
	if s == "" {
		return `<span class="none">—</span>`
	}
	mixed := hasASCIILetter(s)
	n := utf8.RuneCountInString(s)
	var hidden, confusable int
	full := renderRunes(s, mixed, &hidden, &confusable)
	var b strings.Builder
	b.WriteString(`<span class="id" dir="ltr"`)
	if hidden > 0 || confusable > 0 {
		fmt.Fprintf(&b, ` title="%s"`, html.EscapeString(warnText(hidden, confusable)))
	}
	b.WriteString(`>`)
	if n <= identShort {
		b.WriteString(full)
	} else {
		short := string([]rune(s)[:identShort])
		var h, c int
		b.WriteString(`<details class="long"><summary>`)
		b.WriteString(renderRunes(short, mixed, &h, &c))
		fmt.Fprintf(&b, `<span class="more">… %d chars</span></summary><span class="full">`, n)
		b.WriteString(full)
		b.WriteString(`</span></details>`)
	}
	b.WriteString(`</span>`)
	if hidden > 0 || confusable > 0 {
		fmt.Fprintf(&b, `<span class="warn" title="%s">⚠</span>`, html.EscapeString(warnText(hidden, confusable)))
	}
	return template.HTML(b.String())
}

func warnText(hidden, confusable int) string {
	var parts []string
	if hidden > 0 {
		parts = append(parts, fmt.Sprintf("%d invisible or direction-changing character(s)", hidden))
	}
	if confusable > 0 {
		parts = append(parts, fmt.Sprintf("%d non-ASCII character(s) mixed with ASCII letters", confusable))
	}
	return "contains " + strings.Join(parts, " and ")
}

func renderRunes(s string, mixed bool, hidden, confusable *int) string {
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			*hidden++
			fmt.Fprintf(&b, `<span class="esc" title="invalid UTF-8 byte">\x%02X</span>`, s[i])
		case inertRune(r):
			*hidden++
			fmt.Fprintf(&b, `<span class="esc" title="%s">%s</span>`, runeName(r), escapeRune(r))
		case confusableRune(r, mixed):
			*confusable++
			fmt.Fprintf(&b, `<mark class="cf" title="U+%04X, not ASCII">%s<small>%s</small></mark>`,
				r, html.EscapeString(string(r)), escapeRune(r))
		default:
			b.WriteString(html.EscapeString(string(r)))
		}
	}
	return b.String()
}

// escapeRune is the \uXXXX (or \U0010XXXX) spelling of r.
func escapeRune(r rune) string {
	if r > 0xFFFF {
		return fmt.Sprintf(`\U%08X`, r)
	}
	return fmt.Sprintf(`\u%04X`, r)
}

// runeName names the characters a reviewer most needs to recognise.
func runeName(r rune) string {
	switch r {
	case 0x202A:
		return "LEFT-TO-RIGHT EMBEDDING"
	case 0x202B:
		return "RIGHT-TO-LEFT EMBEDDING"
	case 0x202C:
		return "POP DIRECTIONAL FORMATTING"
	case 0x202D:
		return "LEFT-TO-RIGHT OVERRIDE"
	case 0x202E:
		return "RIGHT-TO-LEFT OVERRIDE"
	case 0x2066:
		return "LEFT-TO-RIGHT ISOLATE"
	case 0x2067:
		return "RIGHT-TO-LEFT ISOLATE"
	case 0x2068:
		return "FIRST STRONG ISOLATE"
	case 0x2069:
		return "POP DIRECTIONAL ISOLATE"
	case 0x200B:
		return "ZERO WIDTH SPACE"
	case 0x200C:
		return "ZERO WIDTH NON-JOINER"
	case 0x200D:
		return "ZERO WIDTH JOINER"
	case 0x200E:
		return "LEFT-TO-RIGHT MARK"
	case 0x200F:
		return "RIGHT-TO-LEFT MARK"
	case 0xFEFF:
		return "ZERO WIDTH NO-BREAK SPACE"
	case 0x00AD:
		return "SOFT HYPHEN"
	}
	return fmt.Sprintf("U+%04X, invisible or control character", r)
}

func hasASCIILetter(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}
