// client-go's controller (v0.36.2 as Kubernetes 1.36 ships it, at its defaults: its informer
// streams its initial list) on the watch throughput scenario of ctrlkit's benches/watch.rs,
// for scripts/bench-watch.sh: a shared informer on the namespace's ConfigMaps, a rate-limited
// workqueue, one worker, as client-go's examples/workqueue controller has them.
//
//	watch URL NAMESPACE OBJECTS UPDATES
//
// Syncs, reconciles every object once, prints "ready"; reads "go UNIX_NANOS" from stdin; then
// reconciles until every object's final data.seq (the writers' round robin: update j gives
// object j % OBJECTS the seq j / OBJECTS + 1) was reconciled, recording now - data.t for each
// reconcile. Prints "result SECONDS P50_MS P99_MS PEAK_RSS_MIB CPU_SECONDS" (CPU from go to done).
package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

type tracker struct {
	mu        sync.Mutex
	finals    []int64
	reached   []bool
	reachedN  int
	seen      []bool
	seenN     int
	delays    []int64
	ready     chan struct{}
	done      chan struct{}
	readyOnce sync.Once
	doneOnce  sync.Once
}

func field(cm *corev1.ConfigMap, name string) int64 {
	v, _ := strconv.ParseInt(cm.Data[name], 10, 64)
	return v
}

func (t *tracker) reconciled(cm *corev1.ConfigMap) {
	now := time.Now().UnixNano()
	i, seq, at := field(cm, "i"), field(cm, "seq"), field(cm, "t")
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.seen[i] {
		t.seen[i] = true
		t.seenN++
		if t.seenN == len(t.finals) {
			t.readyOnce.Do(func() { close(t.ready) })
		}
	}
	if at > 0 {
		t.delays = append(t.delays, now-at)
	}
	if seq > 0 && seq >= t.finals[i] && !t.reached[i] {
		t.reached[i] = true
		t.reachedN++
		if t.reachedN == len(t.finals) {
			t.doneOnce.Do(func() { close(t.done) })
		}
	}
}

// cpuSeconds is this process's CPU time, user + system.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func peakRSS() float64 {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kib, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kib / 1024
		}
	}
	return 0
}

func main() {
	url, ns := os.Args[1], os.Args[2]
	objects, _ := strconv.Atoi(os.Args[3])
	updates, _ := strconv.Atoi(os.Args[4])
	t := &tracker{
		finals:  make([]int64, objects),
		reached: make([]bool, objects),
		seen:    make([]bool, objects),
		delays:  make([]int64, 0, updates),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	for j := 0; j < updates; j++ {
		t.finals[j%objects] = int64(j/objects + 1)
	}

	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: url})
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	configmaps := factory.Core().V1().ConfigMaps()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := configmaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		panic(err)
	}
	lister := configmaps.Lister()
	stop := make(chan struct{})
	factory.Start(stop)
	cache.WaitForCacheSync(stop, configmaps.Informer().HasSynced)
	go func() {
		for {
			key, quit := queue.Get()
			if quit {
				return
			}
			namespace, name, _ := cache.SplitMetaNamespaceKey(key)
			if cm, err := lister.ConfigMaps(namespace).Get(name); err == nil {
				t.reconciled(cm)
			}
			queue.Forget(key)
			queue.Done(key)
		}
	}()

	<-t.ready
	fmt.Println("ready")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	goAt, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
	cpuAtGo := cpuSeconds()
	select {
	case <-t.done:
	case <-time.After(600 * time.Second):
		fmt.Fprintf(os.Stderr, "client-go: %d of %d objects reached their final version\n", t.reachedN, objects)
		os.Exit(1)
	}
	seconds := float64(time.Now().UnixNano()-goAt) / 1e9
	cpu := cpuSeconds() - cpuAtGo
	t.mu.Lock()
	delays := t.delays
	t.mu.Unlock()
	sort.Slice(delays, func(a, b int) bool { return delays[a] < delays[b] })
	at := func(q float64) float64 { return float64(delays[int(float64(len(delays)-1)*q)]) / 1e6 }
	fmt.Printf("result %f %f %f %f %f\n", seconds, at(0.5), at(0.99), peakRSS(), cpu)
}
