//! The documentation's shape, checked on every run: the README stays short (what Foothold is, the two commands,
//! links), and every relative link in the README and `docs/` reaches a file of the repository and, when it names
//! a heading (`file.md#heading`), a heading of that file, by the anchors GitHub makes of headings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The README's length limit (issue 49): more than this is a manual, which goes in `docs/`.
const README_MAX_LINES: usize = 200;

/// The README and every Markdown file of `docs/`, under `root` (the workspace, canonical).
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    let docs = root.join("docs");
    for e in std::fs::read_dir(&docs).unwrap_or_else(|e| panic!("{}: {e}", docs.display())) {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The lines of `text` outside its fenced code blocks (links and headings there are examples, not the page's),
/// with their line numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .map(|(i, l)| (i + 1, l))
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|(_, l)| {
            let hashes = l.len() - l.trim_start_matches('#').len();
            (1..=6)
                .contains(&hashes)
                .then(|| l[hashes..].strip_prefix(' '))
                .flatten()
                .map(anchor)
        })
        .collect()
}

/// The targets of the `[text](target)` links of a line, inline code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && b.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_owned());
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(foothold_e2e::workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: how a thing works goes in docs/, \
         measurements in docs/results.md"
    );
}

/// The README's "Documentation" table is the index of `docs/`: every page there and in `docs/reference/` is
/// linked from it, so a page nobody can find from the README fails here.
#[test]
fn every_page_of_the_docs_is_in_the_readmes_index() {
    let root = foothold_e2e::workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let index = readme
        .split_once("\n## Documentation\n")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("the README has a \"## Documentation\" section");
    let mut missing = Vec::new();
    for dir in ["docs", "docs/reference"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") && !index.contains(&format!("({dir}/{name})")) {
                missing.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not linked from the README's Documentation table: {missing:?}"
    );
}

#[test]
fn every_relative_link_reaches_a_file_and_heading() {
    let root = foothold_e2e::workspace().canonicalize().unwrap();
    // Each linked file's anchors, read once.
    let mut headings: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, heading) = match target.split_once('#') {
                    Some((f, h)) => (f, Some(h)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                let place = format!(
                    "{}:{n}: ({target})",
                    page.strip_prefix(&root).unwrap().display()
                );
                let Ok(path) = path.canonicalize() else {
                    broken.push(format!("{place}: no such file"));
                    continue;
                };
                if !path.starts_with(&root) {
                    broken.push(format!("{place}: outside the repository"));
                    continue;
                }
                if let Some(heading) = heading {
                    let known = headings.entry(path.clone()).or_insert_with(|| {
                        anchors(&std::fs::read_to_string(&path).unwrap_or_default())
                    });
                    if !known.contains(heading) {
                        broken.push(format!("{place}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_and_links_are_read_as_github_reads_them() {
    assert_eq!(anchor("A compute node's image"), "a-compute-nodes-image");
    assert_eq!(
        anchor("The image builder (`foothold-build`)"),
        "the-image-builder-foothold-build"
    );
    assert_eq!(
        anchors("# One\n```\n# not a heading\n```\n## Two words\n#not either\n"),
        BTreeSet::from(["one".to_owned(), "two-words".to_owned()])
    );
    assert_eq!(
        link_targets("see [a](a.md#x), `[b](not.md)` and [c](https://e/)"),
        ["a.md#x", "https://e/"]
    );
}

/// The results log's plots (`scripts/plot-progress.py`, which the 1,000-host benchmark runs on its progress
/// log): a line per state and one for memory, an SVG that ends; a line of another shape fails naming it.
#[test]
fn a_benchmarks_progress_log_is_plotted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("progress.log");
    let svg = dir.path().join("progress.svg");
    std::fs::write(
        &log,
        "0 s:  mem 800 MiB\n10 s: registering=600 inspecting=400  mem 1200 MiB\n\
         400 s: available=300 provisioned=700  mem 2900 MiB\n",
    )
    .unwrap();
    let script = foothold_e2e::workspace().join("scripts/plot-progress.py");
    let plot = |log: &Path| {
        std::process::Command::new("python3")
            .arg(&script)
            .arg(log)
            .arg(&svg)
            .arg("a <test>")
            .output()
            .unwrap()
    };
    let made = plot(&log);
    assert!(made.status.success(), "{made:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg ") && text.ends_with("</svg>\n"),
        "{text}"
    );
    assert!(text.contains(">a &lt;test&gt;</text>"), "{text}");
    for name in [
        "registering",
        "inspecting",
        "available",
        "provisioned",
        "memory (MiB, right)",
    ] {
        assert!(
            text.contains(&format!(">{name}</text>")),
            "no {name} in {text}"
        );
    }
    assert_eq!(text.matches("<polyline ").count(), 5, "{text}");

    std::fs::write(&log, "0 s: registering=1 mem 800 MiB\nnot a sample\n").unwrap();
    let refused = plot(&log);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("progress.log:2: not a progress sample: 'not a sample'"),
        "{said}"
    );
}

/// The per-node benchmark's table plotted (`scripts/plot-phases.py`, which `scripts/bench-metal3-nodes.sh` runs):
/// a bar a node with its phases and the rest of its total, the target marked, an SVG that ends; a row whose
/// phase was not seen (`NaN`) fails naming its line.
#[test]
fn the_per_node_benchmarks_table_is_plotted() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("nodes.tsv");
    let svg = dir.path().join("nodes.svg");
    let header =
        "node\tramdisk boot and inventory\tinspection\tcleaning\tavailable to deploying\tdeploy\tfirst boot\t\
                  created to ready\tof the 8 min target\n";
    std::fs::write(
        &table,
        format!(
            "{header}node-ipmi\t60\t20\t40\t5\t90\t70\t330\t0.69\n\
             node-redfish\t80\t25\t45\t5\t100\t75\t400\t0.83\n# seconds\n"
        ),
    )
    .unwrap();
    let script = foothold_e2e::workspace().join("scripts/plot-phases.py");
    let plot = || {
        std::process::Command::new("python3")
            .arg(&script)
            .arg(&table)
            .arg(&svg)
            .output()
            .unwrap()
    };
    let made = plot();
    assert!(made.status.success(), "{made:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg ") && text.ends_with("</svg>\n"),
        "{text}"
    );
    for name in [
        "node-ipmi",
        "node-redfish",
        "330 s",
        "400 s",
        "target 480 s",
        "registration and waits",
        "ramdisk boot and inventory",
        "first boot",
    ] {
        assert!(
            text.contains(&format!(">{name}</text>")),
            "no {name} in {text}"
        );
    }
    // Two bars of seven parts, and the legend's seven swatches.
    assert_eq!(text.matches("height=\"28\"").count(), 14, "{text}");

    std::fs::write(
        &table,
        format!("{header}node-ipmi\tNaN\t20\t40\t5\t90\t70\t330\t0.69\n"),
    )
    .unwrap();
    let refused = plot();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("nodes.tsv:2: a phase was not seen (NaN) or is negative"),
        "{said}"
    );
}
