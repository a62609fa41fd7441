//! The registry driven by real clients against the real binary on 127.0.0.1: skopeo, podman, containerd's
//! ctr (through the mirror configuration the agent generates), crane and oras.

use crate::support;

use std::path::Path;
use std::process::Command;

use crate::support::containerd::{self, Containerd};
use crate::support::{assert_fsck_clean, layout, run, stdout, tool, Agent};

const TOKEN: &str = "test-write-token";

fn skopeo() -> Command {
    let mut c = Command::new(tool("skopeo"));
    c.arg("--insecure-policy");
    c
}

fn push(agent: &Agent, layout_dir: &Path, tag: &str, dest: &str) {
    let mut c = skopeo();
    c.args(["copy", "--dest-tls-verify=false"]);
    if let Some(creds) = agent.creds() {
        c.args(["--dest-creds", &creds]);
    }
    run(c
        .arg(format!("oci:{}:{tag}", layout_dir.display()))
        .arg(format!("docker://{}/{dest}", agent.host())));
}

fn remote_digest(agent: &Agent, reference: &str) -> String {
    support::remote_manifest_digest(
        &["--tls-verify=false"],
        &format!("{}/{reference}", agent.host()),
    )
}

#[test]
fn skopeo_pushes_and_pulls_between_oci_layouts_and_the_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 1, &[300_000, 2_000_000, 50_000], "v1");

    // Without the token the push is refused.
    let denied = skopeo()
        .args(["copy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:v1", src.display()))
        .arg(format!("docker://{}/test/skopeo:v1", agent.host()))
        .output()
        .unwrap();
    assert!(
        !denied.status.success(),
        "push without credentials must fail"
    );
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("401")
            || String::from_utf8_lossy(&denied.stderr).contains("unauthorized")
    );

    push(&agent, &src, "v1", "test/skopeo:v1");
    assert_eq!(
        remote_digest(&agent, "test/skopeo:v1"),
        image.manifest_digest
    );

    // Pull back into a fresh layout: same manifest, same blobs.
    let dst = tmp.path().join("dst");
    run(skopeo()
        .args(["copy", "--src-tls-verify=false"])
        .arg(format!("docker://{}/test/skopeo:v1", agent.host()))
        .arg(format!("oci:{}:back", dst.display())));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dst.join("index.json")).unwrap()).unwrap();
    assert_eq!(
        index["manifests"][0]["digest"],
        image.manifest_digest.as_str()
    );
    for d in image.layer_digests.iter().chain([&image.config_digest]) {
        let a = std::fs::read(src.join("blobs/sha256").join(&d[7..])).unwrap();
        let b = std::fs::read(dst.join("blobs/sha256").join(&d[7..])).unwrap();
        assert!(a == b, "blob {d} differs after the round trip");
    }

    // The same image as a Docker schema 2 manifest: stored and served with its own media type.
    let mut c = skopeo();
    c.args([
        "copy",
        "--format",
        "v2s2",
        "--dest-tls-verify=false",
        "--dest-creds",
        &agent.creds().unwrap(),
    ]);
    run(c
        .arg(format!("oci:{}:v1", src.display()))
        .arg(format!("docker://{}/test/skopeo:docker", agent.host())));
    let docker = "application/vnd.docker.distribution.manifest.v2+json";
    let resp = support::http()
        .get(&agent.url("/v2/test/skopeo/manifests/docker"))
        .header("accept", docker)
        .call()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("content-type").unwrap(), docker);
    let v2s2 = remote_digest(&agent, "test/skopeo:docker");
    assert_ne!(v2s2, image.manifest_digest);
    assert_eq!(
        resp.headers().get("docker-content-digest").unwrap(),
        v2s2.as_str()
    );
    assert_fsck_clean(&agent.data);
}

#[test]
fn podman_pulls_a_pushed_image() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 2, &[100_000, 400_000], "v2");
    push(&agent, &src, "v2", "test/podman:v2");

    let root = tmp.path().join("podman");
    let podman = |args: &[&str]| {
        let mut c = Command::new(tool("podman"));
        c.arg("--root")
            .arg(root.join("root"))
            .arg("--runroot")
            .arg(root.join("run"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ]);
        c.args(args);
        c
    };
    let reference = format!("{}/test/podman:v2", agent.host());
    run(&mut podman(&["pull", "--tls-verify=false", &reference]));
    let digest = stdout(&mut podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Digest}}",
        &reference,
    ]));
    assert_eq!(digest.trim(), image.manifest_digest);
}

/// containerd used with the agent as a mirror pulls `docker.io/library/...` by its original name: the
/// generated hosts.toml sends containerd to the agent, containerd adds `?ns=docker.io`, the agent serves
/// the repository `docker.io/library/<name>`.
#[test]
fn containerd_pulls_by_original_name_through_generated_mirror_config() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 3, &[200_000, 300_000], "1.0");
    push(&agent, &src, "1.0", "docker.io/library/fh-test:1.0");

    let hosts = containerd::mirror_hosts(&agent, "docker.io,quay.io", tmp.path());
    let toml = std::fs::read_to_string(hosts.join("docker.io/hosts.toml")).unwrap();
    assert!(
        toml.contains(&format!("[host.\"http://{}\"]", agent.host())),
        "{toml}"
    );
    let ctd = Containerd::start(&tmp.path().join("containerd"));
    let ctr = |args: &[&str]| ctd.ctr(args);
    let hosts_dir = hosts.to_str().unwrap();
    run(&mut ctr(&[
        "images",
        "pull",
        "--hosts-dir",
        hosts_dir,
        "docker.io/library/fh-test:1.0",
    ]));
    let listed = stdout(&mut ctr(&["images", "ls"]));
    let line = listed
        .lines()
        .find(|l| l.starts_with("docker.io/library/fh-test:1.0"))
        .unwrap_or_else(|| panic!("image not listed:\n{listed}"));
    assert!(line.contains(&image.manifest_digest), "{line}");
    // The agent saw containerd's mirror request with ns=docker.io.
    let agent_log = std::fs::read_to_string(agent.data.with_extension("log")).unwrap();
    assert!(
        agent_log.contains("/v2/library/fh-test/manifests/1.0"),
        "containerd did not go through the mirror"
    );
}

fn metric(agent: &Agent, line_prefix: &str) -> u64 {
    agent
        .metrics()
        .lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn crane_validates_and_copies_with_cross_repository_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), None);
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 4, &[100_000, 200_000, 300_000], "v4");
    push(&agent, &src, "v4", "test/crane:v4");

    let from = format!("{}/test/crane:v4", agent.host());
    run(Command::new(tool("crane")).args(["validate", "--insecure", "--remote", &from]));
    let mounts_before = metric(
        &agent,
        "foothold_http_requests_total{route=\"upload\",method=\"POST\",status=\"201\"",
    );
    let patches_before = metric(
        &agent,
        "foothold_http_requests_total{route=\"upload\",method=\"PATCH\"",
    );
    let to = format!("{}/test/crane-copy:v4", agent.host());
    run(Command::new(tool("crane")).args(["copy", "--insecure", &from, &to]));
    let digest = stdout(Command::new(tool("crane")).args(["digest", "--insecure", &to]));
    assert_eq!(digest.trim(), image.manifest_digest);
    // Config and three layers were mounted, not uploaded again.
    assert_eq!(
        metric(
            &agent,
            "foothold_http_requests_total{route=\"upload\",method=\"POST\",status=\"201\""
        ) - mounts_before,
        4
    );
    assert_eq!(
        metric(
            &agent,
            "foothold_http_requests_total{route=\"upload\",method=\"PATCH\""
        ) - patches_before,
        0
    );
    run(Command::new(tool("crane")).args(["validate", "--insecure", "--remote", &to]));
    assert_fsck_clean(&agent.data);
}

#[test]
fn oras_pushes_an_artifact_with_a_subject_and_the_referrers_api_lists_it() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 5, &[10_000], "v5");
    push(&agent, &src, "v5", "test/oras:v5");

    let sbom = tmp.path().join("sbom.json");
    std::fs::write(&sbom, r#"{"spdxVersion":"SPDX-2.3"}"#).unwrap();
    let script = r#"
import sys, oras.oci, oras.provider
host, token, digest, size, path = sys.argv[1:6]
subject = oras.oci.Subject(mediaType="application/vnd.oci.image.manifest.v1+json", digest=digest, size=int(size))
reg = oras.provider.Registry(hostname=host, insecure=True, auth_backend="basic")
reg.auth.set_basic_auth("foothold", token)
resp = reg.push(target=f"{host}/test/oras:sbom", files=[path + ":application/spdx+json"],
                manifest_annotations={"org.example.kind": "sbom"}, subject=subject, disable_path_validation=True)
print(resp.status_code)
"#;
    let size = std::fs::metadata(src.join("blobs/sha256").join(&image.manifest_digest[7..]))
        .unwrap()
        .len();
    run(Command::new(tool("python3"))
        .arg("-c")
        .arg(script)
        .arg(agent.host())
        .arg(TOKEN)
        .arg(&image.manifest_digest)
        .arg(size.to_string())
        .arg(&sbom)
        .current_dir(tmp.path()));

    let url = agent.url(&format!(
        "/v2/test/oras/referrers/{}",
        image.manifest_digest
    ));
    let mut resp = support::http().get(&url).call().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "application/vnd.oci.image.index.v1+json"
    );
    let index: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    let refs = index["manifests"].as_array().unwrap();
    assert_eq!(refs.len(), 1, "{index}");
    assert_eq!(refs[0]["annotations"]["org.example.kind"], "sbom");
    let artifact_type = refs[0]["artifactType"].as_str().unwrap().to_owned();

    // The artifactType filter keeps it, a different type drops it.
    let filtered = |t: &str| -> serde_json::Value {
        let mut r = support::http()
            .get(&format!("{url}?artifactType={}", t.replace('+', "%2B")))
            .call()
            .unwrap();
        assert_eq!(
            r.headers().get("oci-filters-applied").unwrap(),
            "artifactType"
        );
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    };
    assert_eq!(
        filtered(&artifact_type)["manifests"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        filtered("application/x-other")["manifests"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_fsck_clean(&agent.data);
}
