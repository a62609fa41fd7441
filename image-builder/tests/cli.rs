//! `foothold-build`'s command-line conventions on the real binary: bash completion in a bash that sourced the
//! script, man pages `man` renders, and `migrate` writing the spec format's version into an older spec.

use std::path::Path;
use std::process::Command;

#[path = "../../names/tests/support/cli.rs"]
mod cli_support;
use cli_support::{bash_complete, man_page, reference_is_current};

fn builder() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_foothold-build"))
}

#[test]
fn bash_completes_subcommands_and_flags() {
    assert_eq!(
        bash_complete(builder(), &["foothold-build", "bui"]),
        ["build"]
    );
    assert_eq!(
        bash_complete(builder(), &["foothold-build", "build", "--off"]),
        ["--offline"]
    );
}

#[test]
fn man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let text = man_page(builder(), dir.path(), "foothold-build-build.1");
    for want in ["--offline", "--bundle", "FOOTHOLD_CACHE"] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}

/// `-o json|yaml` on the commands that report: the same fields as data on standard output, the text form
/// unchanged (`scripts/virtual-site.sh` reads `site`'s columns).
#[test]
fn reporting_commands_print_json_or_yaml_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = |args: &[&str]| {
        let out = Command::new(builder()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let site = dir.path().join("lab");
    let site = site.to_str().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&out(&["site", site, "--nodes", "2", "-o", "json"])).unwrap();
    assert_eq!(json[1]["domain"], "lab-node-1");
    assert_eq!(json[1]["tap"], "fhnode1");
    assert_eq!(json[1]["bmc"], "ipmi:6230");
    assert_eq!(json[0]["bmc"], "redfish");
    let other = dir.path().join("lab2");
    let text = out(&["site", other.to_str().unwrap(), "--nodes", "1"]);
    let columns: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(columns.len(), 5, "{text}");
    assert_eq!((columns[0], columns[4]), ("lab2-node-0", "redfish"));

    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packages/lab.yaml");
    let lab = lab.to_str().unwrap();
    let as_json: serde_json::Value =
        serde_json::from_str(&out(&["check", "--allow-unpinned", lab])).unwrap();
    let as_yaml: serde_json::Value =
        serde_saphyr::from_str(&out(&["check", "--allow-unpinned", lab, "-o", "yaml"])).unwrap();
    assert_eq!(as_json, as_yaml);
    assert_eq!(as_yaml["name"], "foothold-lab");
}

#[test]
fn an_old_spec_loads_with_a_warning_and_migrate_writes_the_format_in_and_nothing_else() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packages/lab.yaml");
    let current = std::fs::read_to_string(&lab).unwrap();
    let old: String = current
        .lines()
        .filter(|l| !l.starts_with("apiVersion:") && !l.starts_with("kind:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(old, current, "packages/lab.yaml has no apiVersion and kind");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("lab.yaml");
    std::fs::write(&spec, &old).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(builder())
            .args(args)
            .arg(&spec)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        (text(&out.stdout), text(&out.stderr))
    };
    let (_, stderr) = run(&["check", "--allow-unpinned"]);
    assert!(
        stderr.contains(&format!(
            "{}: warning: no apiVersion and kind: read as foothold.io/v1alpha1 Image; `foothold-build migrate`",
            spec.display()
        )),
        "{stderr}"
    );
    let (stdout, _) = run(&["migrate"]);
    assert!(
        stdout.contains("now foothold.io/v1alpha1 Image"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&spec).unwrap(), current);
    let (stdout, _) = run(&["migrate"]);
    assert!(
        stdout.contains("already foothold.io/v1alpha1 Image"),
        "{stdout}"
    );
    let (_, stderr) = run(&["check", "--allow-unpinned"]);
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn the_command_reference_in_docs_is_the_binary_s() {
    reference_is_current(
        builder(),
        &[
            "## `foothold-build build`",
            "`FOOTHOLD_CACHE`",
            "## `foothold-build migrate`",
        ],
    );
}
