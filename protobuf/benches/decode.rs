//! Decoding one realistic pod (`ctrlkit_apiserver::fixtures::realistic_pod` with managed
//! fields: about 5 KB of JSON) into k8s-openapi's `Pod`, four ways:
//!
//! - `deserializer`: `ctrlkit_protobuf::from_slice` over the protobuf body (and
//!   `deserializer_skip_managed_fields`, with `DecodeOptions::skip_managed_fields`);
//! - `transcoder`: `transcode::to_json` (prost-reflect, then a `serde_json::Value`), then
//!   `serde_json::from_value`;
//! - `json`: `serde_json::from_slice` over the JSON text, what a client reading JSON does;
//! - `prost`: k8s-pb's generated `Pod` decoded by prost, the floor of protobuf decoding (into
//!   types a client cannot use as they are).
//!
//! `cargo bench -p ctrlkit-protobuf --bench decode`; figures in docs/benchmarks.

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use prost::Message as _;
use std::hint::black_box;

use ctrlkit_protobuf::transcode::{from_json, to_json};
use ctrlkit_protobuf::{DecodeOptions, envelope, from_slice};

fn decode(c: &mut Criterion) {
    let object = ctrlkit_apiserver::fixtures::realistic_pod("default", 7, true);
    let json = serde_json::to_vec(&object).expect("a pod serializes");
    let body = from_json(&object).expect("a pod encodes");
    let raw = envelope(&body).expect("an envelope").raw.to_vec();
    let options = DecodeOptions::default();
    eprintln!("pod: {} bytes of JSON, {} bytes of protobuf", json.len(), body.len());
    let mut group = c.benchmark_group("decode_pod");
    group.bench_function("deserializer", |b| {
        b.iter(|| from_slice::<Pod>(black_box(&body), &options).expect("decodes"))
    });
    let skip = DecodeOptions::default().skip_managed_fields(true);
    group.bench_function("deserializer_skip_managed_fields", |b| {
        b.iter(|| from_slice::<Pod>(black_box(&body), &skip).expect("decodes"))
    });
    group.bench_function("transcoder", |b| {
        b.iter(|| {
            let value = to_json(black_box(&body)).expect("decodes");
            serde_json::from_value::<Pod>(value).expect("a pod")
        })
    });
    group.bench_function("json", |b| {
        b.iter(|| serde_json::from_slice::<Pod>(black_box(&json)).expect("decodes"))
    });
    group.bench_function("prost", |b| {
        b.iter(|| k8s_pb::api::core::v1::Pod::decode(black_box(&raw[..])).expect("decodes"))
    });
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
