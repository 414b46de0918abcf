package limits

import "time"

// Reservation makes a check hold its failure budget at once
// (reserve_failures): every allowed check adds one provisional failure to
// each failure log of Escalation, in the same atomic step as the check
// (one script per slot on Redis Cluster), so N parallel guesses before the
// first report count as N failures (Keycloak #31726, Cacti #6996). A
// provisional failure that fills a log strikes like a reported one. A
// distinct failure rule takes the check's value into its Pending set (one
// holder per check), which it counts with its set; a rule without Pending
// takes the value as a reported failure.
//
// What a check added is kept in a reservation record, a small value per
// slot under Records; a report that names the records (ReportRequest.
// Records) settles it once. A check never reported keeps its provisional
// failures: an attempt whose outcome nobody told counts as failed.
type Reservation struct {
	// Escalation holds the failure rules that get the provisional failure
	// and the lockout policy a strike follows.
	Escalation Escalation
	// Records are the reservation record keys, each in the hash tag of
	// some failure logs (e.g. "<prefix>{<tag>}r:<action>:<decision_id>"). A failure
	// log's provisional entry is remembered in the first record that
	// shares its slot (on one node: the first record); a log with no
	// record in its slot gets no provisional failure.
	Records []string
	// TTL is how long a record (and its settled tombstone) lives: the
	// longest failure window, after which its entries have left every
	// window anyway. At least 1ms.
	TTL time.Duration
}

// reservation record values: "p" then, per failure log that got an entry,
// "\n<log key>\n<stamp ms>" (stamp 0: the entry struck and emptied the
// log, nothing to take back), and per distinct rule's pending set
// "\n<pending key>\nv<value, hexadecimal>@<token, hexadecimal>" (or 0,
// as for a log; the token names the pending set's record of the value
// that the hold went to, see redis.lua); a settled record is "s".
const (
	recordPending = "p"
	recordSettled = "s"
)
