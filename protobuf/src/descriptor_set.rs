//! The committed `kubernetes.fds` is what protox compiles from `protos/` (crate docs).

use std::path::{Path, PathBuf};

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

#[test]
fn descriptor_set_is_compiled_from_the_vendored_protos() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("protos");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    let relative: Vec<PathBuf> =
        files.iter().map(|f| f.strip_prefix(&root).expect("under protos/").to_owned()).collect();
    let mut compiler = protox::Compiler::new([&root]).expect("protos/ exists");
    compiler.include_imports(true).include_source_info(false);
    compiler.open_files(&relative).unwrap_or_else(|e| panic!("compiling protos/: {e}"));
    let compiled = compiler.encode_file_descriptor_set();
    let path = crate_dir.join("kubernetes.fds");
    if std::env::var_os("CTRLKIT_PROTOBUF_WRITE_FDS").is_some() {
        std::fs::write(&path, &compiled).expect("writing kubernetes.fds");
        return;
    }
    assert!(
        compiled == crate::schema::DESCRIPTOR_SET,
        "kubernetes.fds is not what protos/ compiles to: rewrite it (see the crate docs)"
    );
}
