//! `foothold-agent import` of OCI image layouts: ours (full reference names), skopeo's (bare tags with
//! --repo), and a layout that lies about a digest (refused, nothing imported).

mod support;

use std::process::Command;

use support::{agent_bin, assert_fsck_clean, layout, run, stdout, tool, Agent};

fn import(
    data: &std::path::Path,
    layout: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    Command::new(agent_bin())
        .arg("import")
        .arg(layout)
        .arg("--data")
        .arg(data)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn imported_layouts_are_served_under_their_names() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ours = tmp.path().join("ours");
    let a = layout::write_image(
        &ours,
        11,
        &[100_000, 20_000],
        "quay.io/metal3-io/ironic:v26",
    );
    let out = import(&data, &ours, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("quay.io/metal3-io/ironic:v26 {}", a.manifest_digest)
    );

    // skopeo writes ref.name as a bare tag: --repo names the repository.
    let src = tmp.path().join("src");
    let b = layout::write_image(&src, 12, &[50_000], "v1");
    let skopeo_layout = tmp.path().join("skopeo");
    run(Command::new(tool("skopeo"))
        .args(["--insecure-policy", "copy"])
        .arg(format!("oci:{}:v1", src.display()))
        .arg(format!("oci:{}:2.0", skopeo_layout.display())));
    let refused = import(&data, &skopeo_layout, &[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("pass --repo"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let out = import(&data, &skopeo_layout, &["--repo", "docker.io/library/tool"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let agent = Agent::start(&data, None);
    for (reference, digest) in [
        ("quay.io/metal3-io/ironic:v26", &a.manifest_digest),
        ("docker.io/library/tool:2.0", &b.manifest_digest),
    ] {
        let remote = support::remote_manifest_digest(
            &["--tls-verify=false"],
            &format!("{}/{reference}", agent.host()),
        );
        assert_eq!(&remote, digest, "{reference}");
    }
    let catalog = stdout(Command::new("curl").args(["-sf", &agent.url("/v2/_catalog")]));
    assert_eq!(
        catalog,
        r#"{"repositories":["docker.io/library/tool","quay.io/metal3-io/ironic"]}"#
    );
    drop(agent);
    assert_fsck_clean(&data);
}

#[test]
fn a_layout_with_a_corrupt_blob_imports_nothing_under_that_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let bad = tmp.path().join("bad");
    let img = layout::write_image(&bad, 13, &[10_000], "example.com/bad:1");
    let layer = bad.join("blobs/sha256").join(&img.layer_digests[0][7..]);
    let mut bytes = std::fs::read(&layer).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    let out = import(&data, &bad, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&img.layer_digests[0]) && err.contains("hashes to"),
        "{err}"
    );
    assert!(!data
        .join("blobs/sha256")
        .join(&img.layer_digests[0][7..])
        .exists());
    assert_fsck_clean(&data);
}
