//! The OCI distribution-spec conformance suite (the newest module the Go proxy serves, pinned in
//! scripts/go-tools and built by scripts/install-test-tools.sh) against the real binary: every API and data
//! set the suite has — pull, push, content discovery and management, sha512 content throughout, upload cancel,
//! push by digest with `?tag=` — with write authentication on. Only sparse manifests stay off: the registry
//! refuses a manifest whose blobs are missing, by design.

use std::process::Command;

use crate::support::{assert_fsck_clean, tool, Agent};

/// The `<testsuite ...>` element's counts from the suite's JUnit report: tests, failures, errors, skipped
/// (the suite leaves out a count that is zero).
fn junit_counts(xml: &str) -> Option<(u32, u32, u32, u32)> {
    let suite = &xml[xml.find("<testsuite ")?..];
    let suite = &suite[..suite.find('>')?];
    let attr = |name: &str| -> Option<u32> {
        let at = suite.find(&format!(" {name}=\""))? + name.len() + 3;
        suite[at..].split('"').next()?.parse().ok()
    };
    Some((
        attr("tests")?,
        attr("failures").unwrap_or(0),
        attr("errors").unwrap_or(0),
        attr("skipped").unwrap_or(0),
    ))
}

#[test]
fn oci_distribution_spec_conformance_suite_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some("conformance-token"));
    let results = tmp.path().join("results");
    let out = Command::new(tool("oci-conformance"))
        .env("OCI_REGISTRY", agent.url("").trim_start_matches("http://"))
        .env("OCI_TLS", "disabled")
        .env("OCI_REPO1", "conformance/one")
        .env("OCI_REPO2", "conformance/two")
        .env("OCI_USERNAME", "foothold")
        .env("OCI_PASSWORD", "conformance-token")
        .env("OCI_API_BLOBS_UPLOAD_CANCEL", "true")
        .env("OCI_API_MANIFESTS_TAG_PARAM", "true")
        .env("OCI_DATA_SHA512", "true")
        .env("OCI_RESULTS_DIR", &results)
        // Its configuration file is ./oci-conformance.yaml: none in this fresh directory.
        .current_dir(tmp.path())
        .output()
        .expect("running oci-conformance");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let junit = std::fs::read_to_string(results.join("junit.xml")).unwrap_or_default();
    let (tests, failures, errors, skipped) =
        junit_counts(&junit).unwrap_or_else(|| panic!("no JUnit report; suite output:\n{text}"));
    println!("conformance: {tests} tests, {failures} failures, {errors} errors, {skipped} skipped");
    assert!(out.status.success(), "conformance suite failed:\n{text}");
    assert_eq!((failures, errors), (0, 0), "{text}");
    assert_eq!(skipped, 0, "a test fell back to 'unsupported':\n{text}");
    assert!(tests >= 900, "only {tests} tests ran:\n{text}");
    for data in ["sha512 blobs", "tag-param-sha512"] {
        assert!(
            junit.contains(&format!("OCI Conformance Test/{data}/")),
            "no {data} tests ran"
        );
    }
    drop(agent);
    assert_fsck_clean(&tmp.path().join("data"));
}

#[test]
fn junit_counts_are_read_from_the_suite_element() {
    let xml = r#"<testsuites time="1" tests="9"><testsuite name="x" tests="986" failures="1" errors="0" disabled="0" skipped="2" time="1"><testcase/></testsuite></testsuites>"#;
    assert_eq!(junit_counts(xml), Some((986, 1, 0, 2)));
    let clean = r#"<testsuites tests="9"><testsuite name="x" tests="986" time="1">"#;
    assert_eq!(junit_counts(clean), Some((986, 0, 0, 0)));
    assert_eq!(junit_counts("<testsuites/>"), None);
}
