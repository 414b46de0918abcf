package limits

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisFunc is redis.lua as a Redis function library (Redis >= 7): loaded
// once with FUNCTION LOAD, called with FCALL. Its helpers are defined when
// the library loads; an EVAL script would define them again on every call
// (about a tenth of a decision's Redis instructions, docs/performance.md).
//
// The library and its one function are named guard_<version>, the version
// a hash of the source, so Guard instances of different versions share a
// Redis during a rolling upgrade, each calling its own library. A library
// that no instance calls any more stays until FUNCTION DELETE or `guard
// redis prune` (PruneFunctionLibraries, docs/redis.md); it holds no data.
type redisFunc struct {
	name string
	code string
}

func newRedisFunc(src string) *redisFunc {
	sum := sha1.Sum([]byte(src))
	name := "guard_" + hex.EncodeToString(sum[:8])
	return &redisFunc{
		name: name,
		code: "#!lua name=" + name + "\n" + src + "\nredis.register_function('" + name + "', run)\n",
	}
}

// load loads the library, replacing one of the same name (the same
// version); on Cluster into every master, since each node has its own
// functions (replicas receive them from their master).
func (f *redisFunc) load(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FunctionLoadReplace(ctx, f.code).Err()
		})
	}
	return c.FunctionLoadReplace(ctx, f.code).Err()
}

// reload is load after a call met "Function not found". On Cluster it
// loads into every master it can reach and fails only when none took the
// library: one unreachable master must not keep it from the node the call
// needs (the call that follows tells whether that node has it now).
func (f *redisFunc) reload(ctx context.Context, c redis.UniversalClient) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return f.load(ctx, c)
	}
	var (
		mu     sync.Mutex
		loaded int
		first  error
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		err := n.FunctionLoadReplace(ctx, f.code).Err()
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			loaded++
		} else if first == nil {
			first = err
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case loaded == 0 && first != nil:
		return first
	}
	return nil
}

// functionMissing reports whether err is Redis's answer to an FCALL of a
// function it does not have: after a restart without persistence, FUNCTION
// FLUSH, or on a node new to the cluster. The caller loads and calls again.
func functionMissing(err error) bool {
	if err == nil {
		return false // before rerr, which escapes: no allocation per reply
	}
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "Function not found")
}

// guardFunc is this build's library (redis.lua).
var guardFunc = newRedisFunc(redisSource)

// FunctionLibrary is the name of this build's function library in Redis.
func FunctionLibrary() string { return guardFunc.name }

// LibraryPrune is one Guard function library found on one Redis node by
// PruneFunctionLibraries.
type LibraryPrune struct {
	Node    string // the node's address ("" on a single Redis or Sentinel's master)
	Library string
	Current bool // this build's library: kept
	Deleted bool
}

// PruneFunctionLibraries deletes the function libraries of other Guard
// versions (guard_ and 16 hexadecimal digits; no other library) from
// Redis, on Cluster from every master, and reports every Guard library it
// found; with dryRun it deletes nothing. A Guard of another version still
// running loads its library again on its next call ("Function not found"),
// so pruning early costs such an instance one reload, not a decision.
func PruneFunctionLibraries(ctx context.Context, c redis.UniversalClient, dryRun bool) ([]LibraryPrune, error) {
	current := FunctionLibrary()
	prune := func(ctx context.Context, n redis.Cmdable, node string) ([]LibraryPrune, error) {
		libs, err := n.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "guard_*"}).Result()
		if err != nil {
			return nil, fmt.Errorf("list function libraries%s: %w", onNode(node), err)
		}
		var out []LibraryPrune
		for _, l := range libs {
			if !isGuardLibrary(l.Name) {
				continue
			}
			p := LibraryPrune{Node: node, Library: l.Name, Current: l.Name == current}
			if !p.Current && !dryRun {
				if err := n.FunctionDelete(ctx, l.Name).Err(); err != nil && !strings.Contains(err.Error(), "Library not found") {
					return out, fmt.Errorf("delete function library %s%s: %w", l.Name, onNode(node), err)
				}
				p.Deleted = true
			}
			out = append(out, p)
		}
		return out, nil
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return prune(ctx, c, "")
	}
	var (
		mu  sync.Mutex
		all []LibraryPrune
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		found, err := prune(ctx, n, n.Options().Addr)
		mu.Lock()
		defer mu.Unlock()
		all = append(all, found...)
		return err
	})
	slices.SortFunc(all, func(a, b LibraryPrune) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Library, b.Library))
	})
	return all, err
}

func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " on " + node
}

// isGuardLibrary reports whether name is a library newRedisFunc names.
func isGuardLibrary(name string) bool {
	hexPart, ok := strings.CutPrefix(name, "guard_")
	if !ok || len(hexPart) != 16 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}
