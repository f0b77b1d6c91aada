// client-go's workqueue (v0.36.2 as Kubernetes 1.36 ships it) on the scenarios of ctrlkit's
// benches/workqueue.rs, for scripts/bench-workqueue.sh.
//
//	workqueue SCENARIO [typed|untyped]   runs SCENARIO once and prints "SCENARIO NS_PER_OP"
//
// Scenarios, as in the Rust file: add, get_done, producers_workers, dedup_storm, dedup_alone,
// rate_limited_forget. Keys are "default/pod-NNNNNN" strings made before the clock starts.
// Queues are the two client-go 1.36's controllers use: typed (the default),
// workqueue.NewTyped[string] and NewTypedRateLimitingQueue(DefaultTypedControllerRateLimiter
// [string]()) for the rate-limited scenario; untyped, workqueue.New() and
// NewRateLimitingQueue(DefaultControllerRateLimiter()), as client-go's examples/workqueue
// controller wires it, its keys boxed into interface values before the clock starts (its best
// path: a user's Add(key) boxes each string anew).
// Producers and workers are goroutines; GOMAXPROCS is the machine's (2 here). With
// CTRLKIT_BENCH_VERBOSE set, the storm prints how many items the workers handled to stderr.
package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

const n = 1000000

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("default/pod-%06d", i)
	}
	return out
}

// queues makes the queues of one flavour, typed or untyped, over its key type T.
type queues[T comparable] struct {
	key         func(string) T
	plain       func() workqueue.TypedInterface[T]
	rateLimited func() workqueue.TypedRateLimitingInterface[T]
}

func typed() queues[string] {
	return queues[string]{
		key:   func(s string) string { return s },
		plain: func() workqueue.TypedInterface[string] { return workqueue.NewTyped[string]() },
		rateLimited: func() workqueue.TypedRateLimitingInterface[string] {
			return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
		},
	}
}

func untyped() queues[any] {
	return queues[any]{
		key:   func(s string) any { return s },
		plain: func() workqueue.TypedInterface[any] { return workqueue.New() },
		rateLimited: func() workqueue.TypedRateLimitingInterface[any] {
			return workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter())
		},
	}
}

// of converts keys to the flavour's key type, outside the timed region.
func (f queues[T]) of(ks []string) []T {
	out := make([]T, len(ks))
	for i, k := range ks {
		out[i] = f.key(k)
	}
	return out
}

func add[T comparable](f queues[T]) time.Duration {
	ks := f.of(keys(n))
	q := f.plain()
	start := time.Now()
	for _, k := range ks {
		q.Add(k)
	}
	return time.Since(start)
}

func getDone[T comparable](f queues[T]) time.Duration {
	ks := f.of(keys(n))
	q := f.plain()
	for _, k := range ks {
		q.Add(k)
	}
	start := time.Now()
	for i := 0; i < len(ks); i++ {
		k, _ := q.Get()
		q.Done(k)
	}
	return time.Since(start)
}

// workers starts two goroutines that get + done until shut down, counting what they handle.
func workers[T comparable](q workqueue.TypedInterface[T], wg *sync.WaitGroup, handled []int) {
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(k)
				handled[w]++
			}
		}(w)
	}
	time.Sleep(5 * time.Millisecond)
}

func producersWorkers[T comparable](f queues[T]) time.Duration {
	ks := f.of(keys(n))
	q := f.plain()
	var wg sync.WaitGroup
	handled := make([]int, 2)
	workers(q, &wg, handled)
	start := time.Now()
	var pg sync.WaitGroup
	half := len(ks) / 2
	for _, part := range [][]T{ks[:half], ks[half:]} {
		pg.Add(1)
		go func(part []T) {
			defer pg.Done()
			for _, k := range part {
				q.Add(k)
			}
		}(part)
	}
	pg.Wait()
	q.ShutDown()
	wg.Wait()
	elapsed := time.Since(start)
	if handled[0]+handled[1] != len(ks) {
		panic("lost items")
	}
	return elapsed
}

// stormKeys is a million adds drawn from 1,000 keys, in turn. Each add's key is a string of
// its own, as a handler makes one per event (cache.MetaNamespaceKeyFunc joins namespace and
// name into a new string) and as the Rust harness hands ctrlkit's queue a String per add:
// adds sharing 1,000 strings would hash bytes always in cache and compare equal by pointer.
func stormKeys[T comparable](f queues[T]) []T {
	distinct := keys(1000)
	adds := make([]T, n)
	for i := range adds {
		adds[i] = f.key(strings.Clone(distinct[i%1000]))
	}
	return adds
}

func dedupStorm[T comparable](f queues[T]) time.Duration {
	adds := stormKeys(f)
	q := f.plain()
	var wg sync.WaitGroup
	handled := make([]int, 2)
	workers(q, &wg, handled)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		for _, k := range adds {
			q.Add(k)
		}
		close(done)
	}()
	<-done
	elapsed := time.Since(start)
	q.ShutDown()
	wg.Wait()
	if os.Getenv("CTRLKIT_BENCH_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "%d items handled by the workers\n", handled[0]+handled[1])
	}
	return elapsed
}

// dedupAlone adds a million keys drawn from 1,000 with no worker running: all but the first
// 1,000 find their key already queued.
func dedupAlone[T comparable](f queues[T]) time.Duration {
	adds := stormKeys(f)
	q := f.plain()
	start := time.Now()
	for _, k := range adds {
		q.Add(k)
	}
	elapsed := time.Since(start)
	if q.Len() != 1000 {
		panic("each key queued once")
	}
	return elapsed
}

func rateLimitedForget[T comparable](f queues[T]) time.Duration {
	ks := f.of(keys(n))
	q := f.rateLimited()
	start := time.Now()
	for _, k := range ks {
		q.AddRateLimited(k)
		q.Forget(k)
	}
	elapsed := time.Since(start)
	q.ShutDown()
	return elapsed
}

// scenarios names each scenario's function for one flavour.
func scenarios[T comparable](f queues[T]) map[string]func() time.Duration {
	return map[string]func() time.Duration{
		"add":                 func() time.Duration { return add(f) },
		"get_done":            func() time.Duration { return getDone(f) },
		"producers_workers":   func() time.Duration { return producersWorkers(f) },
		"dedup_storm":         func() time.Duration { return dedupStorm(f) },
		"dedup_alone":         func() time.Duration { return dedupAlone(f) },
		"rate_limited_forget": func() time.Duration { return rateLimitedForget(f) },
	}
}

func main() {
	flavour := "typed"
	if len(os.Args) == 3 {
		flavour = os.Args[2]
	}
	var all map[string]func() time.Duration
	switch flavour {
	case "typed":
		all = scenarios(typed())
	case "untyped":
		all = scenarios(untyped())
	}
	if len(os.Args) < 2 || len(os.Args) > 3 || all == nil || all[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: workqueue add|get_done|producers_workers|dedup_storm|dedup_alone|rate_limited_forget [typed|untyped]")
		os.Exit(2)
	}
	elapsed := all[os.Args[1]]()
	fmt.Printf("%s %.1f\n", os.Args[1], float64(elapsed.Nanoseconds())/n)
}
