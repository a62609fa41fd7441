//! The shape of the source tree, checked on every run: each crate's module dependency graph has no cycles, no
//! source file grows past 700 lines (a few older files, listed with their size today, may not grow while
//! they wait to be split), and no function of the product's code (the crates' `src/`, not their tests) grows
//! past 120 lines (the same kind of list for the longer ones there were when the cap came).
//!
//! A module depends on another when its code (not its comments or its `mod tests`) names it: `crate::a::b`,
//! `super::x`, or a submodule it declares by its own name (`plan::plan(..)`, `self::plan`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

/// Files still over [`MAX_LINES`], with the size they may not pass: the list only shrinks. Empty since
/// 2026-11-24: every file is under the limit.
const WAITING_TO_BE_SPLIT: &[(&str, usize)] = &[];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The Rust files under `dirs` (relative to the repository): each one's path relative to it, and its path.
fn sources(dirs: &[&str]) -> Vec<(String, PathBuf)> {
    let root = repo();
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    files
        .into_iter()
        .map(|f| {
            (
                f.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                f,
            )
        })
        .collect()
}

/// `src` without comments, string and char literals (their content emptied), and without its `mod tests`.
fn code(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                i = end;
            }
            b'r' if b.get(i + 1) == Some(&b'#') || (b.get(i + 1) == Some(&b'"')) => {
                // A raw string: r"..." or r#"..."#.
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                i = src[start..]
                    .find(&close)
                    .map_or(b.len(), |e| start + e + close.len());
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('a', '\n', '\''); lifetimes ('a) pass through.
                let end = src[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
                i = end;
                out.push_str("' '");
            }
            c => {
                let ch = src[i..].chars().next().expect("in bounds");
                out.push(ch);
                i += if c.is_ascii() { 1 } else { ch.len_utf8() };
            }
        }
    }
    match out.find("#[cfg(test)]") {
        Some(at) if out[at..].contains("mod tests") => out[..at].to_owned(),
        _ => out,
    }
}

fn idents(s: &str) -> Vec<&str> {
    s.split("::").collect()
}

/// The module graph of the crate whose root is `src/lib.rs`: module path (`http::state`) → the modules it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        match parts.as_slice() {
            [one] if one == "main" => continue, // the binary: a crate of its own
            [one] if one == "lib" => parts.clear(),
            _ => {}
        }
        modules.insert(
            parts.join("::"),
            code(&std::fs::read_to_string(&f).unwrap()),
        );
    }
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let resolve = |path: &[&str]| -> Option<String> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|c| known.contains(c))
    };
    let path_chars = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    // The module a path in module `here` names, if it names one of this crate's.
    let target = |here: &[&str], path: &[&str]| -> Option<String> {
        match path {
            ["crate", rest @ ..] => resolve(rest),
            // `pub(super)` names no module; `super::x` does.
            ["super", _, ..] => {
                let ups = path.iter().take_while(|p| **p == "super").count();
                let base = &here[..here.len().saturating_sub(ups)];
                let full: Vec<&str> = base.iter().chain(&path[ups..]).copied().collect();
                resolve(&full).or_else(|| Some(base.join("::")))
            }
            ["self", rest @ ..] if !rest.is_empty() => {
                let full: Vec<&str> = here.iter().chain(rest).copied().collect();
                resolve(&full).filter(|f| *f != here.join("::"))
            }
            // A submodule named by itself (`plan::plan`).
            [first, _, ..] => {
                let child: Vec<&str> = here.iter().chain([first]).copied().collect();
                known.contains(&child.join("::")).then(|| child.join("::"))
            }
            _ => None,
        }
    };
    let mut g = BTreeMap::new();
    for (m, text) in &modules {
        let here: Vec<&str> = if m.is_empty() { vec![] } else { idents(m) };
        let mut deps = BTreeSet::new();
        let mut at = 0;
        while let Some(found) = text[at..].find(|c: char| c.is_ascii_alphabetic() || c == '_') {
            let start = at + found;
            let end = text[start..]
                .find(|c: char| !path_chars(c))
                .map_or(text.len(), |e| start + e);
            at = end.max(start + 1);
            if start > 0 && path_chars(text[..start].chars().last().unwrap()) {
                continue;
            }
            let token = &text[start..end];
            // `use super::{a, b::c}`: each item of the group, after the common prefix.
            let items: Vec<String> = if token.ends_with("::") && text[end..].starts_with('{') {
                let close = text[end..].find('}').map_or(text.len(), |c| end + c);
                text[end + 1..close]
                    .split(',')
                    .map(|item| item.trim().split([' ', '{']).next().unwrap_or_default())
                    .filter(|item| !item.is_empty())
                    .map(|item| format!("{token}{item}"))
                    .collect()
            } else {
                vec![token.trim_end_matches(':').to_owned()]
            };
            for item in &items {
                if let Some(t) = target(&here, &idents(item)).filter(|t| t != m) {
                    deps.insert(t);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// Every cycle of `g` (its strongly connected components of more than one module).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules share a component when each reaches the other.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            for d in g.get(&n).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|k| (k, reach(k))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in g.keys() {
        if done.contains(m) || !reached[m].contains(m) {
            continue;
        }
        let scc: Vec<String> = reached[m]
            .iter()
            .filter(|o| reached.get(o).is_some_and(|r| r.contains(m)))
            .cloned()
            .collect();
        done.extend(scc.iter().cloned());
        out.push(scc);
    }
    out
}

#[test]
fn the_module_graphs_have_no_cycles() {
    for krate in ["agent", "image-builder"] {
        let g = graph(&repo().join(krate).join("src"));
        assert!(g.len() > 20, "{krate}: only {} modules found", g.len());
        let found = cycles(&g);
        assert!(found.is_empty(), "{krate}: import cycles {found:?}");
    }
}

#[test]
fn the_checker_sees_a_cycle_through_super_crate_and_a_child_named_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "pub mod plan;\n// crate::c in a comment\nfn f() { let s = \"crate::c\"; plan::go() }\n",
    )
    .unwrap();
    std::fs::write(src.join("a/plan.rs"), "pub fn go() { crate::b::x() }\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub fn x() { super::a::f() }\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "#[cfg(test)]\nmod tests { use crate::a; }\n",
    )
    .unwrap();
    let g = graph(src);
    assert_eq!(
        g["a"],
        BTreeSet::from(["a::plan".to_owned()]),
        "comments and strings do not count"
    );
    assert!(g["c"].is_empty(), "tests do not count");
    assert_eq!(
        cycles(&g),
        [vec!["a".to_owned(), "a::plan".into(), "b".into()]]
    );
    std::fs::write(src.join("b.rs"), "pub fn x() {}\n").unwrap();
    assert!(cycles(&graph(src)).is_empty());
}

#[test]
fn no_source_file_grows_past_700_lines() {
    let root = repo();
    let waiting: BTreeMap<&str, usize> = WAITING_TO_BE_SPLIT.iter().copied().collect();
    let mut over = Vec::new();
    for (rel, f) in sources(&["agent", "image-builder", "names", "tests"]) {
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        let limit = waiting.get(rel.as_str()).copied().unwrap_or(MAX_LINES);
        if lines > limit {
            over.push(format!("{rel}: {lines} lines (at most {limit})"));
        }
    }
    assert!(over.is_empty(), "split these files: {over:#?}");
    for (rel, _) in WAITING_TO_BE_SPLIT {
        assert!(
            root.join(rel).is_file(),
            "{rel} is listed but gone: take it off the list"
        );
    }
}

const MAX_FN_LINES: usize = 120;

/// Functions of the product's code over [`MAX_FN_LINES`] when the cap came (2026-12-02), with the size they may
/// not pass (`file:function`): the list only shrinks.
const WAITING_TO_BE_SHORTENED: &[(&str, usize)] = &[
    ("agent/src/controllers/bpa/heal.rs:decide", 198),
    ("agent/src/controllers/bpa/health.rs:heal", 247),
    ("agent/src/controllers/bpa/mod.rs:apply", 315),
    ("agent/src/controllers/bpa/plan.rs:plan", 142),
    ("agent/src/controllers/sip/mod.rs:apply", 156),
    ("agent/src/controllers/sip/plan.rs:plan", 173),
    ("agent/src/controllers/software/mod.rs:apply", 143),
    ("agent/src/controllers/vino/ipam.rs:allocate", 121),
    ("agent/src/controllers/vino/mod.rs:realise", 144),
    ("agent/src/controllers/vino/render.rs:desired", 370),
    ("agent/src/gotmpl/funcs.rs:call", 184),
    ("agent/src/http/registry/mod.rs:dispatch", 256),
    ("agent/src/http/serve.rs:serve", 130),
    ("agent/src/installer/cluster.rs:converge", 138),
    ("agent/src/main.rs:run", 303),
    ("agent/src/metrics.rs:render", 161),
    ("agent/src/vino_builder/mod.rs:apply", 183),
    ("image-builder/src/build/data.rs:stage", 150),
    ("image-builder/src/build/iso.rs:write", 125),
    ("image-builder/src/kube.rs:render", 138),
    ("image-builder/src/main.rs:real_main", 350),
    ("image-builder/src/spec/validate.rs:validate_with", 184),
];

/// Each function with a body in `code` (as [`code`] leaves it): its name, the line its `fn` is on (1-based) and
/// its length in lines, from that line to its closing brace. Function-pointer types (`fn(u8)`) and bodiless
/// declarations (`fn f();` in a trait) are not functions here.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = code[i..].find("fn ").map(|at| i + at) {
        i = at + 3;
        if at > 0 && ident(b[at - 1]) {
            continue;
        }
        let rest = code[i..].trim_start();
        let name: String = rest
            .bytes()
            .take_while(|&c| ident(c))
            .map(char::from)
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = code[i..].find(['{', ';']).map(|o| i + o) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = b.len();
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = code[..at].matches('\n').count() + 1;
        let lines = code[at..close].matches('\n').count() + 1;
        found.push((name, line, lines));
    }
    found
}

#[test]
fn the_function_finder_measures_bodies_and_skips_pointers_and_declarations() {
    let src = "trait T {\n    fn declared(&self);\n}\nfn short() -> fn(u8) -> u8 {\n    |x| x\n}\n\n\
               pub async fn long<F: Fn()>(f: F)\nwhere F: Send,\n{\n    if true { f() }\n    let s = \"}\";\n}\n";
    assert_eq!(
        functions(&code(src)),
        [("short".to_owned(), 4, 3), ("long".to_owned(), 8, 6)]
    );
}

#[test]
fn no_function_of_the_product_grows_past_120_lines() {
    let waiting: BTreeMap<&str, usize> = WAITING_TO_BE_SHORTENED.iter().copied().collect();
    let mut over = Vec::new();
    let mut seen = BTreeSet::new();
    for (rel, f) in sources(&["agent/src", "image-builder/src", "names/src"]) {
        // Test modules in files of their own are tests, not the product.
        if rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs") || rel.contains("/tests/") {
            continue;
        }
        for (name, line, lines) in functions(&code(&std::fs::read_to_string(&f).unwrap())) {
            let key = format!("{rel}:{name}");
            let limit = waiting.get(key.as_str()).copied();
            if limit.is_some() {
                seen.insert(key.clone());
            }
            if lines > limit.unwrap_or(MAX_FN_LINES) {
                over.push(format!("(\"{key}\", {lines}), // line {line}"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "shorten these functions (at most {MAX_FN_LINES} lines, or their size on the waiting list):\n{}",
        over.join("\n")
    );
    for (key, _) in WAITING_TO_BE_SHORTENED {
        assert!(
            seen.contains(*key),
            "{key} is listed but gone: take it off the list"
        );
    }
}
