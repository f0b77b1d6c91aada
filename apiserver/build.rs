//! Compiles the vendored Kubernetes `.proto` files (`protos/`, see `scripts/vendor-protos.py`)
//! into a descriptor set, from which the server decodes protobuf bodies. protox is a .proto
//! compiler in Rust: no `protoc` is needed.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=protos");
    let root = Path::new("protos");
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    let set = protox::Compiler::new([root])
        .and_then(|mut compiler| {
            compiler.include_imports(true).include_source_info(false).open_files(&files)?;
            Ok(compiler.encode_file_descriptor_set())
        })
        .unwrap_or_else(|e| panic!("compiling protos/: {e}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("kubernetes.fds"), set).expect("writing the descriptor set");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading protos/") {
        let path = entry.expect("reading protos/").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "proto") {
            files.push(path);
        }
    }
}
