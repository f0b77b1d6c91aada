// client-go's informer (v1.20.2, vendored in the Kubernetes tree) on the initial-sync scenario
// of ctrlkit's benches/informer.rs, for scripts/bench-informer.sh: a shared informer on pods,
// the key-enqueuing handler, a rate-limited workqueue and one worker with a no-op reconcile,
// as the seed article's controller.
//
//	informer TARGET N NAMESPACE
//
// TARGET is "kubeconfig:PATH" or the server's URL; NAMESPACE empty lists all namespaces.
// Prints "result SYNC_S ALL_S PEAK_RSS_MIB SETTLED_RSS_MIB": the time until the cache synced,
// until every pod was reconciled once, the peak RSS, and the RSS 3 s after that, the informer
// still running.
package main

import (
	"fmt"
	"io/ioutil"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

func statusMiB(field string) float64 {
	status, _ := ioutil.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, field) {
			kib, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kib / 1024
		}
	}
	return 0
}

func main() {
	target, namespace := os.Args[1], os.Args[3]
	n, _ := strconv.Atoi(os.Args[2])
	var config *rest.Config
	if path := strings.TrimPrefix(target, "kubeconfig:"); path != target {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			panic(err)
		}
		config = c
	} else {
		config = &rest.Config{Host: target}
	}
	start := time.Now()
	client := kubernetes.NewForConfigOrDie(config)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter())
	pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(key)
			}
		},
	})
	lister := pods.Lister()
	stop := make(chan struct{})
	factory.Start(stop)
	cache.WaitForCacheSync(stop, pods.Informer().HasSynced)
	sync := time.Since(start)
	done := make(chan struct{})
	go func() {
		seen := 0
		for {
			item, quit := queue.Get()
			if quit {
				return
			}
			ns, name, _ := cache.SplitMetaNamespaceKey(item.(string))
			if _, err := lister.Pods(ns).Get(name); err == nil {
				seen++
				if seen == n {
					close(done)
				}
			}
			queue.Forget(item)
			queue.Done(item)
		}
	}()
	<-done
	all := time.Since(start)
	time.Sleep(3 * time.Second)
	settled := statusMiB("VmRSS:")
	fmt.Printf("result %f %f %f %f\n", sync.Seconds(), all.Seconds(), statusMiB("VmHWM:"), settled)
}
