// Command rawhttp is scripts/bench.sh's floor for Guard's HTTP path: a bare
// net/http server that reads each request body and answers a fixed JSON
// body of the size and headers of a Guard allow decision. Its CPU per
// request is what any Go HTTP service pays on the machine before doing any
// work; Guard's CPU per decision is reported as a multiple of it.
//
//	go run ./scripts/rawhttp -listen 127.0.0.1:18093
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

// answer is a 3-rule allow decision as Guard answers it.
const answer = `{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01KB2Y5E6XW0N6TQ3D9V8M1ZPA","degraded":false,` +
	`"limits":[{"rule":"login/ip","dimension":"ip","limit":1000000,"window_ms":60000,"remaining":999999,"reset_ms":60000},` +
	`{"rule":"login/user","dimension":"user","limit":1000000,"window_ms":900000,"remaining":999999,"reset_ms":900000},` +
	`{"rule":"login/device","dimension":"device","limit":1000000,"window_ms":3600000,"remaining":999999,"reset_ms":3600000}],"lockout":null}`

func main() {
	listen := flag.String("listen", "127.0.0.1:18093", "address to serve on")
	flag.Parse()
	body := []byte(answer)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 8<<10)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("X-Request-Id", "01KB2Y5E6XW0N6TQ3D9V8M1ZPA")
		h.Set("RateLimit-Policy", `"login/ip";q=1000000;w=60, "login/user";q=1000000;w=900, "login/device";q=1000000;w=3600`)
		h.Set("RateLimit", `"login/ip";r=999999;t=60`)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
