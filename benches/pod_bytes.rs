//! Where the bytes of a cached pod go: the heap a decoded k8s-openapi `Pod` takes, by field
//! group, against its JSON, and what glibc's malloc adds to each allocation. The first step of
//! issue 14 (informer memory): it says what a leaner store would have to save.
//!
//! `cargo bench --bench pod_bytes --features testing`
//!
//! The pod is `ctrlkit_apiserver::fixtures::realistic_pod` as an informer caches it (a
//! Deployment's pod with labels, annotations, an owner, two containers with env, resources,
//! probes and mounts, volumes, a running status; `managedFields` dropped, as ctrlkit's
//! informer drops them). A counting global allocator records, while each part is decoded, the
//! bytes asked for, the allocations, and the bytes glibc's malloc takes for them (its chunk:
//! the request plus 8 bytes of header, rounded up to 16, at least 32). Decoded parts are kept
//! alive while counted, as in a cache.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, Probe, SecurityContext, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

struct Counting;

static ASKED: AtomicIsize = AtomicIsize::new(0);
static CHUNKS: AtomicIsize = AtomicIsize::new(0);
static COUNT: AtomicIsize = AtomicIsize::new(0);

/// The size of glibc malloc's chunk for a request of `size` bytes on 64-bit Linux.
fn chunk(size: usize) -> isize {
    ((size + 8 + 15) & !15).max(32) as isize
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ASKED.fetch_add(layout.size() as isize, Ordering::Relaxed);
            CHUNKS.fetch_add(chunk(layout.size()), Ordering::Relaxed);
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        ASKED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        CHUNKS.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live (asked, chunks, allocations) now.
fn live() -> (isize, isize, isize) {
    (ASKED.load(Ordering::Relaxed), CHUNKS.load(Ordering::Relaxed), COUNT.load(Ordering::Relaxed))
}

/// Decodes `n` copies of `json` as `T`, keeps them, and returns the heap each takes.
fn measure<T: DeserializeOwned>(json: &str, n: usize) -> (f64, f64, f64) {
    let before = live();
    let kept: Vec<T> = (0..n).map(|_| serde_json::from_str(json).unwrap()).collect();
    let after = live();
    // The Vec of the kept values is not the objects' own memory.
    let vec_bytes = (n * std::mem::size_of::<T>()) as isize;
    let per = |a: isize, b: isize, own: isize| (a - b - own) as f64 / n as f64;
    let result = (
        per(after.0, before.0, vec_bytes) + std::mem::size_of::<T>() as f64,
        per(after.1, before.1, chunk(vec_bytes as usize)) + std::mem::size_of::<T>() as f64,
        per(after.2, before.2, 1),
    );
    drop(kept);
    result
}

fn main() {
    let value = ctrlkit_apiserver::fixtures::realistic_pod("default", 1, false);
    let json = value.to_string();
    let part = |name: &str| value[name].to_string();
    const N: usize = 1000;
    let rows = [
        ("whole pod", json.len(), measure::<Pod>(&json, N)),
        ("metadata", part("metadata").len(), measure::<ObjectMeta>(&part("metadata"), N)),
        ("spec", part("spec").len(), measure::<PodSpec>(&part("spec"), N)),
        ("status", part("status").len(), measure::<PodStatus>(&part("status"), N)),
    ];
    println!(
        "| part | JSON | decoded: bytes asked | malloc chunks | allocations | chunks / JSON |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, json_len, (asked, chunks, count)) in rows {
        println!(
            "| {name} | {json_len} B | {asked:.0} B | {chunks:.0} B | {count:.0} | {:.1}x |",
            chunks / json_len as f64
        );
    }
    let spec: PodSpec = serde_json::from_str(&part("spec")).unwrap();
    let (containers, volumes) = (spec.containers.len(), spec.volumes.as_ref().map_or(0, Vec::len));
    println!();
    println!("| type | size_of (inline, set or not) | in this pod |");
    println!("|---|---|---|");
    let sizes = [
        ("Pod", std::mem::size_of::<Pod>(), 1),
        ("PodSpec", std::mem::size_of::<PodSpec>(), 1),
        ("Container", std::mem::size_of::<Container>(), containers),
        ("Probe", std::mem::size_of::<Probe>(), 0),
        ("SecurityContext", std::mem::size_of::<SecurityContext>(), 0),
        ("Volume", std::mem::size_of::<Volume>(), volumes),
        ("ObjectMeta", std::mem::size_of::<ObjectMeta>(), 1),
        ("PodStatus", std::mem::size_of::<PodStatus>(), 1),
        ("ContainerStatus", std::mem::size_of::<ContainerStatus>(), containers),
    ];
    for (name, size, count) in sizes {
        let count = if count == 0 { "inside the above".to_owned() } else { format!("{count}") };
        println!("| {name} | {size} B | {count} |");
    }
}
