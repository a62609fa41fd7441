//! `foothold-agent import` of OCI image layouts: ours (full reference names), skopeo's (bare tags with
//! --repo), and a layout that lies about a digest (refused, nothing imported).

use crate::support;

use std::process::Command;

use crate::support::{agent_bin, assert_fsck_clean, layout, run, stdout, tool, Agent};

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

/// A multi-platform index of which the layout carries only linux/amd64 (as the image builder pulls it): refused
/// by default, naming the absent manifest; with --present-platforms the index is kept byte for byte, the
/// present platform is served and the absent one answers MANIFEST_UNKNOWN.
#[test]
fn an_index_with_absent_platforms_imports_only_with_present_platforms() {
    use sha2::{Digest, Sha256};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = tmp.path().join("partial");
    let amd64 = layout::write_image(&dir, 14, &[30_000], "unused");
    let amd64_size = std::fs::metadata(dir.join("blobs/sha256").join(&amd64.manifest_digest[7..]))
        .unwrap()
        .len();
    let arm64 = format!("sha256:{}", hex::encode(Sha256::digest(b"never pulled")));
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": amd64.manifest_digest,
             "size": amd64_size, "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": arm64,
             "size": 1234, "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
        ],
    }))
    .unwrap();
    let index_digest = format!("sha256:{}", hex::encode(Sha256::digest(&index)));
    std::fs::write(dir.join("blobs/sha256").join(&index_digest[7..]), &index).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": index_digest, "size": index.len(),
            "annotations": {"org.opencontainers.image.ref.name": "registry.example/multi:1"},
        }]}))
        .unwrap(),
    )
    .unwrap();

    let refused = import(&data, &dir, &[]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&arm64) && err.contains("--present-platforms"),
        "{err}"
    );
    assert!(!data
        .join("blobs/sha256")
        .join(&amd64.layer_digests[0][7..])
        .exists());

    let out = import(&data, &dir, &["--present-platforms"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("registry.example/multi:1 {index_digest}")
    );

    let agent = Agent::start(&data, None);
    let get = |reference: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-H"])
            .arg("Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json")
            .arg(agent.url(&format!("/v2/registry.example/multi/manifests/{reference}")))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.to_owned(), body.to_owned())
    };
    let (code, body) = get("1");
    assert_eq!(code, "200");
    assert_eq!(
        body.as_bytes(),
        &index[..],
        "the index is served byte for byte"
    );
    assert_eq!(get(&amd64.manifest_digest).0, "200");
    let (code, body) = get(&arm64);
    assert_eq!(code, "404");
    assert!(body.contains("MANIFEST_UNKNOWN"), "{body}");
    drop(agent);
    assert_fsck_clean(&data);
}

/// A layout whose every blob is named by sha512 (`blobs/sha512/…`) imports, is served under those digests, and
/// fsck re-hashes it with sha512 — and notices when such a blob is damaged.
#[test]
fn sha512_layouts_import_and_serve_under_sha512_digests() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let src = tmp.path().join("layout");
    let image = layout::write_image_with(
        layout::Algo::Sha512,
        &src,
        31,
        &[40_000],
        "docker.io/library/five:12",
    );
    assert!(image.manifest_digest.starts_with("sha512:"));
    let out = import(&data, &src, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("docker.io/library/five:12 {}", image.manifest_digest)
    );

    let agent = Agent::start(&data, None);
    let headers = stdout(Command::new("curl").args([
        "-sfI",
        "-H",
        "Accept: application/vnd.oci.image.manifest.v1+json",
        &agent.url("/v2/docker.io/library/five/manifests/12"),
    ]));
    assert!(
        headers
            .to_ascii_lowercase()
            .contains(&format!("docker-content-digest: {}", image.manifest_digest)),
        "{headers}"
    );
    for digest in image.layer_digests.iter().chain([&image.config_digest]) {
        let body = Command::new("curl")
            .args([
                "-sf",
                &agent.url(&format!("/v2/docker.io/library/five/blobs/{digest}")),
            ])
            .output()
            .unwrap();
        assert!(body.status.success(), "GET {digest}");
        assert_eq!(&layout::Algo::Sha512.digest(&body.stdout), digest);
    }
    drop(agent);
    assert_fsck_clean(&data);
    let layer = &image.layer_digests[0];
    assert!(data.join("blobs/sha512").join(&layer[7..]).exists());
    std::fs::write(data.join("blobs/sha512").join(&layer[7..]), b"damaged").unwrap();
    let fsck = Command::new(agent_bin())
        .args(["fsck", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    let report =
        String::from_utf8_lossy(&fsck.stdout).into_owned() + &String::from_utf8_lossy(&fsck.stderr);
    assert!(!fsck.status.success(), "{report}");
    assert!(
        report.contains(&format!("blob {layer} is corrupt")),
        "{report}"
    );
}
