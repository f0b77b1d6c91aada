//! The documentation's shape, checked so that it cannot drift: every chapter of the guide is
//! compiled as a doc test, the README stays short with its two set-up commands on top, and no
//! relative link in the Markdown points at a file that is not there.

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The targets of a Markdown text's inline links, `[text](target)`.
fn links(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_owned());
        }
    }
    found
}

/// Every Markdown file of the repository's documentation (not `target/`).
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![
        root().join("README.md"),
        root().join("CONTRIBUTING.md"),
        root().join("examples/README.md"),
    ];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn every_chapter_of_the_guide_is_compiled_as_a_doc_test() {
    let summary = read(&root().join("docs/book/src/SUMMARY.md"));
    let lib = read(&root().join("src/lib.rs"));
    let chapters = links(&summary);
    assert!(chapters.len() >= 10, "SUMMARY.md lists {} chapters", chapters.len());
    for chapter in chapters {
        assert!(root().join("docs/book/src").join(&chapter).is_file(), "{chapter} is missing");
        let include = format!("include_str!(\"../docs/book/src/{chapter}\")");
        assert!(lib.contains(&include), "src/lib.rs does not compile {chapter}: add {include}");
    }
}

#[test]
fn the_readme_is_short_and_starts_with_the_two_set_up_commands() {
    let readme = read(&root().join("README.md"));
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 250, "README.md has {} lines", lines.len());
    for (n, line) in lines.iter().enumerate() {
        assert!(line.chars().count() <= 100, "README.md:{}: {} characters", n + 1, line.len());
    }
    let first_block = readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next());
    let commands: Vec<&str> = first_block
        .expect("a sh block")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(commands, ["cargo run --example pods", "cargo test --all-features"]);
    let ci = read(&root().join(".ci/run"));
    assert!(ci.lines().any(|l| l.trim() == commands[1]), ".ci/run does not run {}", commands[1]);
}

#[test]
fn relative_links_in_the_documentation_point_at_files_that_exist() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        for target in links(&read(&file)) {
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                continue;
            }
            let resolved = file.parent().expect("a file has a folder").join(path);
            if !resolved.exists() {
                broken.push(format!("{}: {target}", file.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
