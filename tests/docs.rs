//! The documentation's shape, checked so that it cannot drift: every chapter of the guide is
//! compiled as a doc test, the README stays short with its two set-up commands on top and its
//! performance as a short table, the design notes and the changelog keep their bounds, and no
//! relative link in the Markdown points at a file that is not there.

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The targets of a Markdown text's links: inline, `[text](target)`, and reference
/// definitions, `[label]: target` on a line of their own.
fn links(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_owned());
        }
    }
    for line in markdown.lines() {
        if let Some((label, target)) = line.split_once("]: ")
            && label.starts_with('[')
            && !label.contains(' ')
        {
            found.push(target.trim().to_owned());
        }
    }
    found
}

/// The prose paragraphs of a Markdown text (list items each on their own), outside fenced
/// code, tables and headings, each as its words.
fn paragraphs(markdown: &str) -> Vec<Vec<&str>> {
    let mut found = vec![Vec::new()];
    let mut in_code = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_code = !in_code;
        }
        if in_code
            || trimmed.starts_with("```")
            || trimmed.is_empty()
            || trimmed.starts_with('|')
            || trimmed.starts_with('#')
            || trimmed.starts_with("- ")
        {
            found.push(Vec::new());
        }
        if !in_code
            && !trimmed.starts_with("```")
            && !trimmed.starts_with('|')
            && !trimmed.starts_with('#')
        {
            found.last_mut().expect("one paragraph at least").extend(trimmed.split_whitespace());
        }
    }
    found.retain(|words| !words.is_empty());
    found
}

/// Every Markdown file of the repository's documentation (not `target/`).
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![
        root().join("README.md"),
        root().join("CONTRIBUTING.md"),
        root().join("ARCHITECTURE.md"),
        root().join("CHANGELOG.md"),
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
fn the_readme_gives_performance_as_a_table_of_six_rows_and_no_paragraph_runs_long() {
    let readme = read(&root().join("README.md"));
    for words in paragraphs(&readme) {
        let start = words.iter().take(8).copied().collect::<Vec<_>>().join(" ");
        assert!(words.len() <= 120, "README.md: a paragraph of {} words: {start} ...", words.len());
    }
    // Later claims replace a row rather than add one.
    let section = readme.split("\nPerformance").nth(1).expect("a paragraph starting Performance");
    let table =
        section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    let rows = table.count().saturating_sub(2);
    assert!((1..=6).contains(&rows), "the README's performance table has {rows} rows");
}

/// Each place a text names an issue by number ("issue 12", "Issues #3"), as its first 20
/// characters.
fn issue_numbers(text: &str) -> Vec<String> {
    // Indexes into the text itself: lowercasing can change a character's length in bytes.
    let mut found = Vec::new();
    for (at, _) in text.char_indices() {
        let rest = &text[at..];
        if !rest.get(..5).is_some_and(|word| word.eq_ignore_ascii_case("issue")) {
            continue;
        }
        let after = rest[5..].trim_start_matches([' ', 's', 'S', '#']);
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            found.push(rest.chars().take(20).collect());
        }
    }
    found
}

#[test]
fn issue_numbers_are_found_in_any_script_without_a_panic() {
    // "é" straddles the 20th byte; "İ" grows by a byte when lowercased.
    assert_eq!(issue_numbers("issue 5 aaaaaaaaaaaé and on"), ["issue 5 aaaaaaaaaaaé"]);
    assert_eq!(issue_numbers("İ: see Issue 7."), ["Issue 7."]);
    assert_eq!(issue_numbers("Issues #12, 13"), ["Issues #12, 13"]);
    assert!(issue_numbers("an issue of taste; issues left").is_empty());
}

#[test]
fn the_design_notes_are_in_sections_and_the_changelog_is_a_release_record() {
    let design = root().join("docs/design");
    for entry in std::fs::read_dir(&design).expect("docs/design") {
        let path = entry.expect("a directory entry").path();
        if path.file_name().is_some_and(|n| n == "README.md") {
            continue;
        }
        let note = read(&path);
        for heading in ["\n## The problem\n", "\n## The design\n", "\n## Tried and dropped\n"] {
            assert!(note.contains(heading), "{}: no {}", path.display(), heading.trim());
        }
    }
    let workqueue = read(&design.join("workqueue.md")).lines().count();
    assert!(workqueue < 200, "docs/design/workqueue.md has {workqueue} lines");

    let changelog = read(&root().join("CHANGELOG.md"));
    let lines = changelog.lines().count();
    assert!(lines < 400, "CHANGELOG.md has {lines} lines");
    let named = issue_numbers(&changelog);
    assert!(named.is_empty(), "CHANGELOG.md names an issue number: {}", named.join("; "));
    for release in changelog.split("\n## ").skip(1) {
        let mut groups: Vec<&str> = release.lines().filter(|l| l.starts_with("### ")).collect();
        let count = groups.len();
        groups.sort_unstable();
        groups.dedup();
        assert_eq!(
            groups.len(),
            count,
            "a group twice in CHANGELOG.md's {}",
            release.lines().next().unwrap_or("")
        );
    }
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
