//! serde_json against sonic-rs and simd-json, decoding the pods the store_read bench caches
//! (`ctrlkit_apiserver::fixtures::realistic_pod`, managedFields dropped, as serde_json encodes
//! a k8s-openapi `Pod`: ~3.3 KB) into k8s-openapi `Pod`s, per pod, in three shapes:
//! `loop` decodes one and drops it at once; `ring` keeps the last 1,024 decoded, dropping the
//! oldest as the default store's hot set does on a cold `get`; `batch` decodes all 10,000
//! into a vector. simd-json parses in place: each text is copied into a buffer first, counted.
use k8s_openapi::api::core::v1::Pod;
use std::time::Instant;

fn main() {
    let texts: Vec<Box<str>> = (0..10_000)
        .map(|i| {
            let v =
                ctrlkit_apiserver::fixtures::realistic_pod(&format!("ns-{}", i % 100), i, false);
            let p: Pod = serde_json::from_value(v).unwrap();
            serde_json::to_string(&p).unwrap().into()
        })
        .collect();
    let bytes = texts.iter().map(|t| t.len()).sum::<usize>() / texts.len();
    println!("{} pods, {bytes} bytes each on average", texts.len());
    type Decode = fn(&str, &mut Vec<u8>) -> Pod;
    let decoders: [(&str, Decode); 3] = [
        ("serde_json", |s, _| serde_json::from_str(s).unwrap()),
        ("sonic-rs", |s, _| sonic_rs::from_str(s).unwrap()),
        ("simd-json", |s, buf| {
            buf.clear();
            buf.extend_from_slice(s.as_bytes());
            simd_json::serde::from_slice(buf).unwrap()
        }),
    ];
    let n = 50_000;
    for round in 1..=5 {
        for (name, decode) in decoders {
            let mut buf = Vec::new();
            let t = Instant::now();
            for i in 0..n {
                std::hint::black_box(decode(&texts[i % texts.len()], &mut buf));
            }
            let looped = t.elapsed() / n as u32;
            let mut ring: Vec<Option<Pod>> = (0..1024).map(|_| None).collect();
            let t = Instant::now();
            for i in 0..n {
                ring[i % 1024] = Some(decode(&texts[i % texts.len()], &mut buf));
            }
            let ringed = t.elapsed() / n as u32;
            drop(ring);
            let t = Instant::now();
            let all: Vec<Pod> = texts.iter().map(|s| decode(s, &mut buf)).collect();
            let batch = t.elapsed() / texts.len() as u32;
            drop(all);
            println!(
                "round {round} {name:<10} loop {looped:>10.2?}  ring {ringed:>10.2?}  batch {batch:>10.2?}"
            );
        }
    }
}
