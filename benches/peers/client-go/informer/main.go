// client-go's informer (v0.36.2 as Kubernetes 1.36 ships it, at its defaults: its informers
// stream their initial list) on the initial-sync scenario of ctrlkit's benches/informer.rs,
// for scripts/bench-informer.sh, in the shape SHAPE. The wire format each reads: client-go
// 1.36's generated clients prefer protobuf for built-in kinds (gentype.PrefersProtobuf in
// kubernetes/typed/core/v1/pod.go) unless the rest.Config sets a ContentType; a plain
// RESTClient reads JSON.
//
//	controller                 a shared informer on pods from the informer factory, the
//	                           key-enqueuing handler, a rate-limited workqueue and one worker
//	                           reading each pod from the lister, a no-op reconcile; protobuf,
//	                           the generated client's default
//	controller-example-wiring  the same controller wired as client-go's examples/workqueue
//	                           wires it: NewListWatchFromClient + NewIndexerInformer; JSON,
//	                           through the plain RESTClient
//	controller-protobuf        the first with protobuf set by hand (ContentType
//	                           application/vnd.kubernetes.protobuf, as kube-controller-manager
//	                           runs)
//	controller-json            the first forced to JSON (ContentType application/json), the
//	                           wire format ctrlkit reads
//	informer                   the informer alone, as a user writes one first: no handler, no
//	                           queue; protobuf, the generated client's default
//
//	informer TARGET N NAMESPACE SHAPE
//
// TARGET is "kubeconfig:PATH" or the server's URL; NAMESPACE empty lists all namespaces.
// Prints "result SYNC_S ALL_S PEAK_RSS_MIB SETTLED_RSS_MIB CPU_S": the time until the cache
// synced (cache.WaitForCacheSync, which polls every 100 ms, as users call it), until every pod
// was reconciled once (the sync time again in the informer shape), the peak RSS, the RSS 3 s
// after that, the informer still running, and the process's CPU time (user + system) at the
// end of the measured work. Prints "measured" first, at the end of the measured work: the
// bench reads the API server's CPU then.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

func statusMiB(field string) float64 {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, field) {
			kib, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kib / 1024
		}
	}
	return 0
}

// The process's CPU time so far, user and system, in seconds.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: informer TARGET N NAMESPACE controller|controller-example-wiring|controller-protobuf|controller-json|informer")
		os.Exit(2)
	}
	target, namespace, shape := os.Args[1], os.Args[3], os.Args[4]
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		panic(err)
	}
	var config *rest.Config
	if path := strings.TrimPrefix(target, "kubeconfig:"); path != target {
		if config, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			panic(err)
		}
	} else {
		config = &rest.Config{Host: target}
	}
	switch shape {
	case "controller", "controller-example-wiring", "informer":
	case "controller-protobuf":
		config.ContentType = "application/vnd.kubernetes.protobuf"
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	case "controller-json":
		// A ContentType set by hand overrides the generated client's preference for protobuf.
		config.ContentType = "application/json"
	default:
		fmt.Fprintf(os.Stderr, "informer: unknown shape %q\n", shape)
		os.Exit(2)
	}
	start := time.Now()
	client := kubernetes.NewForConfigOrDie(config)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	stop := make(chan struct{})
	// The RSS 3 s after the end, the informer still running, and the line for the bench.
	report := func(sync, all time.Duration) {
		cpu := cpuSeconds()
		fmt.Println("measured")
		time.Sleep(3 * time.Second)
		settled := statusMiB("VmRSS:")
		fmt.Printf("result %f %f %f %f %f\n", sync.Seconds(), all.Seconds(), statusMiB("VmHWM:"), settled, cpu)
	}
	if shape == "informer" {
		factory.Start(stop)
		cache.WaitForCacheSync(stop, informer.HasSynced)
		sync := time.Since(start)
		report(sync, sync)
		return
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(key)
			}
		},
	}
	// How the worker reads a pod: from the factory's lister, or from the example's indexer.
	var get func(ns, name string) error
	if shape == "controller-example-wiring" {
		listWatch := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", namespace, fields.Everything())
		indexer, controller := cache.NewIndexerInformer(listWatch, &v1.Pod{}, 0, handler, cache.Indexers{})
		get = func(ns, name string) error {
			_, exists, err := indexer.GetByKey(ns + "/" + name)
			if err == nil && !exists {
				err = fmt.Errorf("%s/%s not cached", ns, name)
			}
			return err
		}
		go controller.Run(stop)
		cache.WaitForCacheSync(stop, controller.HasSynced)
	} else {
		if _, err := informer.AddEventHandler(handler); err != nil {
			panic(err)
		}
		lister := pods.Lister()
		get = func(ns, name string) error {
			_, err := lister.Pods(ns).Get(name)
			return err
		}
		factory.Start(stop)
		cache.WaitForCacheSync(stop, informer.HasSynced)
	}
	sync := time.Since(start)
	done := make(chan struct{})
	go func() {
		seen := 0
		for {
			key, quit := queue.Get()
			if quit {
				return
			}
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			if err := get(ns, name); err == nil {
				seen++
				if seen == n {
					close(done)
				}
			}
			queue.Forget(key)
			queue.Done(key)
		}
	}()
	<-done
	report(sync, time.Since(start))
}
