package api

import (
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
)

// The answer of POST /v1/check is written by sdk.CheckResponse.AppendJSON
// instead of encoding/json: it is on every decision, its shape is fixed,
// and reflection was the larger part of writing it. AppendJSON produces
// exactly the bytes json.Marshal produces (held to that in sdk and in
// checkjson_test.go, fuzzed).

// jsonContentType is the Content-Type gin's c.JSON sets.
var jsonContentType = []string{"application/json; charset=utf-8"}

// jsonBuffers holds the buffers check answers are built in.
var jsonBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

// writeCheckJSON answers 200 with r as c.JSON would: the same status,
// Content-Type (unless already set) and body.
func writeCheckJSON(c *gin.Context, r *sdk.CheckResponse) {
	bp := jsonBuffers.Get().(*[]byte)
	buf := r.AppendJSON((*bp)[:0])
	c.Status(http.StatusOK)
	h := c.Writer.Header()
	if len(h["Content-Type"]) == 0 {
		h["Content-Type"] = jsonContentType
	}
	if _, err := c.Writer.Write(buf); err != nil {
		_ = c.Error(err) // as gin's Render does
		c.Abort()
	}
	if cap(buf) <= 64<<10 { // a huge answer is not worth keeping
		*bp = buf
		jsonBuffers.Put(bp)
	}
}
