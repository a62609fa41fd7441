//! The OCI distribution-spec conformance suite (built by scripts/install-test-tools.sh from the pinned Go
//! module) against the real binary, with pull, push, content discovery and content management enabled and
//! write authentication on.

use std::process::Command;

use crate::support::{assert_fsck_clean, tool, Agent};

#[test]
fn oci_distribution_spec_conformance_suite_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some("conformance-token"));
    let report = tmp.path().join("report");
    std::fs::create_dir_all(&report).unwrap();
    let out = Command::new(tool("conformance.test"))
        .env("OCI_ROOT_URL", agent.url(""))
        .env("OCI_NAMESPACE", "conformance/one")
        .env("OCI_CROSSMOUNT_NAMESPACE", "conformance/two")
        .env("OCI_USERNAME", "foothold")
        .env("OCI_PASSWORD", "conformance-token")
        .env("OCI_TEST_PULL", "1")
        .env("OCI_TEST_PUSH", "1")
        .env("OCI_TEST_CONTENT_DISCOVERY", "1")
        .env("OCI_TEST_CONTENT_MANAGEMENT", "1")
        .env("OCI_AUTOMATIC_CROSSMOUNT", "true")
        .env("OCI_REPORT_DIR", &report)
        .args(["-ginkgo.no-color"])
        .current_dir(tmp.path())
        .output()
        .expect("running conformance.test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = text
        .lines()
        .find(|l| l.contains("Passed") && l.contains("Failed"))
        .unwrap_or("(no summary line)");
    println!("conformance: {summary}");
    assert!(out.status.success(), "conformance suite failed:\n{text}");
    assert!(summary.contains("| 0 Failed"), "{summary}");
    let passed: u32 = summary
        .split(" Passed")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= 70, "only {passed} specs ran: {summary}");
    drop(agent);
    assert_fsck_clean(&tmp.path().join("data"));
}
