//! What each store costs on the reconcile path: reads from the cache of 10,000 realistic pods,
//! for the all-decoded store (`Indexer::decoded`), the default (`Indexer::new`: JSON, with the
//! 1,024 objects read or written most recently decoded too) and the compact one
//! (`Indexer::compact`: JSON alone).
//!
//! `cargo bench --bench store_read`
//!
//! Three informers, one per store, sync 10,000 `ctrlkit_apiserver::fixtures::realistic_pod`s
//! in 100 namespaces from the embedded API server (managedFields dropped, as informers cache
//! them); then criterion times, for each store, what a reconcile does with the cache: `get`
//! of one key read again and again (hot in the default store), `get_cold` of the next of all
//! 10,000 keys in turn (never hot in the default store: each read decodes the pod and makes it
//! hot, pushing out the oldest), `by_index` of a 100-pod namespace, and `list` of all 10,000;
//! each read dropped after.

use std::hint::black_box;

use criterion::Criterion;
use ctrlkit::cache::{
    Indexer, Informer, ListWatch, NAMESPACE_INDEX, ObjectKey, wait_for_cache_sync,
};
use ctrlkit_apiserver::ApiServer;
use ctrlkit_apiserver::fixtures::realistic_pod;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube_client::Api;
use kube_client::api::PostParams;

const PODS: usize = 10_000;
const NAMESPACES: usize = 100;

fn main() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (_server, stores) = rt.block_on(async {
        let server = ApiServer::start().await.unwrap();
        let namespaces: Api<Namespace> = Api::all(server.client());
        for n in 0..NAMESPACES {
            let ns = serde_json::from_value(
                serde_json::json!({"metadata": {"name": format!("ns-{n}")}}),
            )
            .unwrap();
            namespaces.create(&PostParams::default(), &ns).await.unwrap();
        }
        for i in 0..PODS {
            let ns = format!("ns-{}", i % NAMESPACES);
            let pods: Api<Pod> = Api::namespaced(server.client(), &ns);
            let pod = serde_json::from_value(realistic_pod(&ns, i, false)).unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
        let mut stores = Vec::new();
        let indexers = [
            ("decoded", Indexer::decoded()),
            ("default", Indexer::new()),
            ("compact", Indexer::compact()),
        ];
        for (name, indexer) in indexers {
            let informer = Informer::builder(ListWatch::new(Api::<Pod>::all(server.client())))
                .indexer(indexer)
                .build();
            let running = informer.clone();
            tokio::spawn(async move { running.run(std::future::pending()).await });
            assert!(wait_for_cache_sync(&[&informer], std::future::pending()).await.is_ok());
            assert_eq!(informer.indexer().len(), PODS);
            stores.push((name, informer.indexer()));
        }
        (server, stores)
    });
    let mut c = Criterion::default().configure_from_args();
    let pod = realistic_pod("ns-7", 7, false);
    let key = ObjectKey::namespaced("ns-7", pod["metadata"]["name"].as_str().unwrap());
    let mut group = c.benchmark_group("store_read");
    for (name, indexer) in &stores {
        assert!(indexer.get(&key).is_some());
        group.bench_function(format!("get/{name}"), |b| {
            b.iter(|| black_box(indexer.get(black_box(&key))))
        });
        let keys = indexer.list_keys();
        let mut next = 0;
        group.bench_function(format!("get_cold/{name}"), |b| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                black_box(indexer.get(black_box(&keys[next])))
            })
        });
        group.bench_function(format!("by_index_100/{name}"), |b| {
            b.iter(|| black_box(indexer.by_index(NAMESPACE_INDEX, black_box("ns-3")).unwrap()))
        });
        group
            .bench_function(format!("list_10000/{name}"), |b| b.iter(|| black_box(indexer.list())));
    }
    group.finish();
    c.final_summary();
}
