// client-go's workqueue (v0.36.2 as Kubernetes 1.36 ships it, its typed queues) on the
// scenarios of ctrlkit's benches/workqueue.rs, for scripts/bench-workqueue.sh.
//
//	workqueue SCENARIO   runs SCENARIO once and prints "SCENARIO NS_PER_OP"
//
// Scenarios, as in the Rust file: add, get_done, producers_workers, dedup_storm,
// rate_limited_forget. Keys are "default/pod-NNNNNN" strings made before the clock starts;
// queues are the ones client-go 1.36's controllers use (workqueue.NewTyped[string], and
// NewTypedRateLimitingQueue(DefaultTypedControllerRateLimiter[string]()) for the rate-limited
// scenario).
// Producers and workers are goroutines; GOMAXPROCS is the machine's (2 here).
package main

import (
	"fmt"
	"os"
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

func add() time.Duration {
	ks := keys(n)
	q := workqueue.NewTyped[string]()
	start := time.Now()
	for _, k := range ks {
		q.Add(k)
	}
	return time.Since(start)
}

func getDone() time.Duration {
	ks := keys(n)
	q := workqueue.NewTyped[string]()
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
func workers(q workqueue.TypedInterface[string], wg *sync.WaitGroup, handled []int) {
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

func producersWorkers() time.Duration {
	ks := keys(n)
	q := workqueue.NewTyped[string]()
	var wg sync.WaitGroup
	handled := make([]int, 2)
	workers(q, &wg, handled)
	start := time.Now()
	var pg sync.WaitGroup
	half := len(ks) / 2
	for _, part := range [][]string{ks[:half], ks[half:]} {
		pg.Add(1)
		go func(part []string) {
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

func dedupStorm() time.Duration {
	distinct := keys(1000)
	adds := make([]string, n)
	for i := range adds {
		adds[i] = distinct[i%1000]
	}
	q := workqueue.NewTyped[string]()
	var wg sync.WaitGroup
	workers(q, &wg, make([]int, 2))
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
	return elapsed
}

func rateLimitedForget() time.Duration {
	ks := keys(n)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	start := time.Now()
	for _, k := range ks {
		q.AddRateLimited(k)
		q.Forget(k)
	}
	elapsed := time.Since(start)
	q.ShutDown()
	return elapsed
}

func main() {
	scenarios := map[string]func() time.Duration{
		"add":                 add,
		"get_done":            getDone,
		"producers_workers":   producersWorkers,
		"dedup_storm":         dedupStorm,
		"rate_limited_forget": rateLimitedForget,
	}
	if len(os.Args) != 2 || scenarios[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: workqueue add|get_done|producers_workers|dedup_storm|rate_limited_forget")
		os.Exit(2)
	}
	elapsed := scenarios[os.Args[1]]()
	fmt.Printf("%s %.1f\n", os.Args[1], float64(elapsed.Nanoseconds())/n)
}
