package sdk_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/guardhq/guard/sdk"
)

// A receiver of lockout notifications: verify the signature over the raw
// body, deduplicate on id (deliveries are at least once), answer 2xx.
func ExampleVerifyWebhook() {
	secret := []byte("whsec-from-notifications.secret")
	seen := map[string]bool{} // use a table with a unique key in production
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		if err := sdk.VerifyWebhook(secret, r.Header.Get(sdk.SignatureHeader), body, time.Now(), 0); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var n sdk.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if !seen[n.ID] {
			seen[n.ID] = true
			if n.Event == sdk.NotificationLockout && n.User != nil {
				fmt.Printf("tell %s: locked (%s) until %s\n", *n.User, n.Reason, *n.Until)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})

	// What Guard sends, twice (a retry after a lost answer).
	body := `{"id":"01JDZ8K3Q4W5E6R7T8Y9U0I1O2","event":"lockout","at":"2026-12-01T11:00:00.000Z",` +
		`"instance":"guard-1","ledger":"auth","dimension":"user","user":"alice@example.com","ip":null,` +
		`"device":null,"level":1,"until":"2026-12-01T11:01:00.000Z","reason":"login/user/failures"}`
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/hooks/guard", strings.NewReader(body))
		req.Header.Set(sdk.SignatureHeader, sdk.SignWebhook(secret, time.Now(), []byte(body)))
		rec := httptest.NewRecorder()
		hook.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// A forged request.
	req := httptest.NewRequest(http.MethodPost, "/hooks/guard", strings.NewReader(body))
	req.Header.Set(sdk.SignatureHeader, sdk.SignWebhook([]byte("guess"), time.Now(), []byte(body)))
	rec := httptest.NewRecorder()
	hook.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// tell alice@example.com: locked (login/user/failures) until 2026-12-01T11:01:00.000Z
	// 204
	// 204
	// 401
}
