package api

import (
	"strings"
	"testing"
)

// rewriteServerAnswer leaves alone every write that is not exactly one of
// net/http's own answers: a handler's answer, a part of a streamed body
// that happens to look like a status line, a long write.
func TestRewriteServerAnswerLeavesOthers(t *testing.T) {
	for name, p := range map[string]string{
		"handler answer":      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: abc\r\nDate: x\r\nContent-Length: 2\r\n\r\n{}",
		"handler 417-ish":     "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nX-Request-Id: abc\r\nDate: x\r\nContent-Length: 0\r\n\r\n",
		"body text like 417":  "HTTP/1.1 417 x\r\nuser,ip\r\n",
		"body text like 400":  "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + strings.Repeat("x", 600),
		"body like OPTIONS *": "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nDate: x\r\nmore body",
		"not a status line":   "{\"events\":[]}",
		"short":               "HTTP/1.1 ",
		"short status":        "HTTP/1.1 4\r\naaaaaaaaaaaa",
		"empty status":        "HTTP/1.1 \r\naaaaaaaaaaaa",
	} {
		if out, ok := rewriteServerAnswer([]byte(p)); ok {
			t.Errorf("%s: rewritten to %q", name, out)
		}
	}
}
