package api

import (
	"errors"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"
)

// MaxFormBytes is the largest review form Guard reads (4 MiB): a bulk
// unlock of a full page of 1000 lockouts with the longest identifiers
// fits. Larger forms are answered 413 too_large.
const MaxFormBytes = 4 << 20

// limitForm bounds the body of a review form before anything reads it.
// Without it net/http reads 10 MiB of a url-encoded form and gin parses a
// multipart one with 32 MiB in memory and the rest of its files on disk,
// for as long as the read timeout lets a client send: on /ui/login,
// before any key is checked.
func (s *server) limitForm(c *gin.Context) {
	if c.Request.ContentLength > MaxFormBytes {
		s.formTooLarge(c)
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, MaxFormBytes)
	var err error
	if mt, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type")); mt == "multipart/form-data" {
		// The whole body fits in memory, so no file part reaches disk.
		err = c.Request.ParseMultipartForm(MaxFormBytes)
	} else {
		err = c.Request.ParseForm()
	}
	// Other parse errors keep what was read, as gin's PostForm always
	// has: the handlers judge the fields.
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		s.formTooLarge(c)
		return
	}
	c.Next()
}

func (s *server) formTooLarge(c *gin.Context) {
	// Nothing more is read from this connection.
	c.Header("Connection", "close")
	s.renderError(c, http.StatusRequestEntityTooLarge, "Request too large", "The form is larger than 4 MiB.")
}
