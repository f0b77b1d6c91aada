//! Wire shapes the vendored messages do not have, on messages compiled from a small test
//! proto: maps of numbers and bools, and field numbers past 63.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost_reflect::prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value as Proto};
use serde::Deserialize as _;
use serde_json::{Value, json};

use super::limits::{len_field, varint_field};
use crate::DecodeOptions;
use crate::decode::message::MessageDe;
use crate::decode::table::{Table, build};

const PROTO: &str = r#"
syntax = "proto2";
package ctrlkit.test;
message Small {
  map<string, int32> numbers = 1;
  map<string, bool> flags = 2;
  map<string, double> ratios = 3;
  map<string, sint64> deltas = 4;
  optional string name = 5;
  repeated string tags = 100;
  repeated int64 counts = 101;
}
"#;

/// The pool compiled from [`PROTO`] by protox, and `Small`'s table: once, as the tests run in
/// parallel.
static COMPILED: LazyLock<(DescriptorPool, &'static Table)> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("ctrlkit-protobuf-small-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("small.proto"), PROTO).unwrap();
    let mut compiler = protox::Compiler::new([&dir]).unwrap();
    compiler.open_files(["small.proto"]).unwrap();
    let pool = DescriptorPool::decode(compiler.encode_file_descriptor_set().as_slice()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let tables: &'static _ = Box::leak(Box::new(build(&pool)));
    (pool, tables.get("ctrlkit.test.Small").unwrap())
});

fn compiled() -> (DescriptorPool, &'static Table) {
    COMPILED.clone()
}

fn decode(table: &'static Table, bytes: &[u8]) -> Result<Value, crate::Error> {
    let options = DecodeOptions::default();
    let de = MessageDe { table, bytes, depth: 1, options: &options, type_meta: None };
    Value::deserialize(de)
}

#[test]
fn maps_of_numbers_and_bools_are_read_as_entries() {
    let (pool, table) = compiled();
    let mut message = DynamicMessage::new(pool.get_message_by_name("ctrlkit.test.Small").unwrap());
    let map = |entries: Vec<(&str, Proto)>| {
        let entries: HashMap<_, _> =
            entries.into_iter().map(|(k, v)| (MapKey::String(k.to_owned()), v)).collect();
        Proto::Map(entries)
    };
    message.set_field_by_name("numbers", map(vec![("a", Proto::I32(1)), ("b", Proto::I32(-2))]));
    message.set_field_by_name("flags", map(vec![("on", Proto::Bool(true))]));
    message.set_field_by_name("ratios", map(vec![("r", Proto::F64(0.5))]));
    message.set_field_by_name("deltas", map(vec![("d", Proto::I64(-3))]));
    let mut bytes = message.encode_to_vec();
    // An entry without its value: the kind's default, as protobuf reads it.
    bytes.extend(len_field(2, &len_field(1, b"off")));
    let value = decode(table, &bytes).unwrap();
    assert_eq!(
        value,
        json!({ "numbers": { "a": 1, "b": -2 }, "flags": { "on": true, "off": false },
            "ratios": { "r": 0.5 }, "deltas": { "d": -3 } })
    );
    // An entry's value of the wrong wire type is malformed, not a number read as bytes.
    let bad = len_field(1, &[len_field(1, b"x"), len_field(2, b"y")].concat());
    assert!(matches!(decode(table, &bad), Err(crate::Error::Malformed { .. })));
}

#[test]
fn repeated_fields_past_63_in_two_runs_are_read_whole_once() {
    let (_, table) = compiled();
    let mut bytes = len_field(100, b"a");
    bytes.extend(len_field(100, b"b"));
    bytes.extend(varint_field(101, 1));
    bytes.extend(len_field(5, b"n"));
    bytes.extend(len_field(100, b"c"));
    bytes.extend(len_field(101, &[2, 3])); // packed
    bytes.extend(len_field(1, &[len_field(1, b"k"), varint_field(2, 7)].concat()));
    bytes.extend(varint_field(101, 4));
    let value = decode(table, &bytes).unwrap();
    assert_eq!(
        value,
        json!({ "tags": ["a", "b", "c"], "counts": [1, 2, 3, 4], "name": "n",
            "numbers": { "k": 7 } })
    );
    // A serde-derive type sees each field once (twice would be duplicate_field).
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Small {
        tags: Vec<String>,
        counts: Vec<i64>,
        name: String,
        numbers: HashMap<String, i32>,
    }
    let options = DecodeOptions::default();
    let de = MessageDe { table, bytes: &bytes, depth: 1, options: &options, type_meta: None };
    let small = Small::deserialize(de).unwrap();
    assert_eq!((small.tags.len(), small.counts.len()), (3, 4));
}

#[test]
fn a_singular_field_written_twice_is_the_types_to_take() {
    let (_, table) = compiled();
    let mut bytes = len_field(5, b"first");
    bytes.extend(len_field(5, b"second"));
    assert_eq!(decode(table, &bytes).unwrap(), json!({ "name": "second" }), "the last");
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Named {
        name: String,
    }
    let options = DecodeOptions::default();
    let de = MessageDe { table, bytes: &bytes, depth: 1, options: &options, type_meta: None };
    let error = Named::deserialize(de).unwrap_err();
    assert_eq!(error, crate::Error::Deserialize("duplicate field `name`".into()));
}
