//! The seed article's pod controller, on the workqueue alone (the informer lands next).
//!
//! A producer task stands in for the informer's event handlers: it adds pod keys the way
//! `AddFunc`/`UpdateFunc`/`DeleteFunc` do, a burst of updates to one pod included. Workers run
//! the seed's `processNextItem` loop: `get`, sync, `done`, and `handleErr`'s
//! `forget` / `add_rate_limited` / drop-after-5-retries. One pod fails its first two syncs to
//! show the retry path. Ctrl-C stops it early.
//!
//! `cargo run --example pods [-- --workers N]`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlkit::workqueue::WorkQueue;

const MAX_RETRIES: u32 = 5;

/// The pods that "exist", standing in for the informer's indexer.
type Store = Arc<Mutex<HashMap<String, String>>>;

fn sync_to_stdout(store: &Store, key: &str, failures: &Mutex<u32>) -> Result<(), String> {
    if key == "default/flaky" {
        let mut f = failures.lock().unwrap();
        if *f < 2 {
            *f += 1;
            return Err(format!("simulated failure {} of 2", *f));
        }
    }
    match store.lock().unwrap().get(key) {
        None => println!("Pod {key} does not exist anymore"),
        Some(name) => println!("Sync/Add/Update for Pod {name}"),
    }
    Ok(())
}

async fn run_worker(queue: WorkQueue<String>, store: Store, failures: Arc<Mutex<u32>>) {
    while let Some(key) = queue.get().await {
        match sync_to_stdout(&store, &key, &failures) {
            Ok(()) => queue.forget(&key),
            Err(err) if queue.num_requeues(&key) < MAX_RETRIES => {
                eprintln!("Error syncing pod {key}: {err}");
                queue.add_rate_limited(key.clone());
            }
            Err(err) => {
                queue.forget(&key);
                eprintln!("Dropping pod {key:?} out of the queue: {err}");
            }
        }
        queue.done(&key);
    }
}

async fn produce(queue: WorkQueue<String>, store: Store) {
    let put = |name: &str| {
        store.lock().unwrap().insert(format!("default/{name}"), name.to_owned());
        queue.add(format!("default/{name}"));
    };
    for name in ["web-0", "web-1", "db-0", "flaky"] {
        put(name);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A burst of updates to one pod: the queue hands its key out once.
    for _ in 0..10 {
        put("web-1");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.lock().unwrap().remove("default/db-0");
    queue.add("default/db-0".to_owned());
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::main]
async fn main() {
    let workers = std::env::args()
        .skip_while(|a| a != "--workers")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1usize);
    let queue = WorkQueue::builder().name("pods").build();
    let store: Store = Arc::default();
    let failures = Arc::new(Mutex::new(0));
    println!("Starting Pod controller");
    let handles: Vec<_> = (0..workers)
        .map(|_| tokio::spawn(run_worker(queue.clone(), store.clone(), failures.clone())))
        .collect();
    tokio::select! {
        _ = produce(queue.clone(), store) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    println!("Stopping Pod controller");
    queue.shut_down_with_drain().await;
    for h in handles {
        let _ = h.await;
    }
}
