//! container_images uploads: image archives made offline by skopeo (docker-archive and oci-archive) are
//! uploaded through the BPA REST API, imported under the names they carry, and pulled back from the registry
//! by skopeo and containerd's ctr with the digests the record reports. In-process: a table of malicious and
//! broken archives, each refused with 422 and leaving nothing behind — no tag, no manifest, no blob.

use crate::support;

use std::process::Command;

use crate::support::containerd::{mirror_hosts, Containerd};
use crate::support::inproc::{self, call};
use crate::support::{assert_fsck_clean, layout, remote_manifest_digest, run, stdout, tool, Agent};
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

const TOKEN: &str = "archive-token";

/// Creates a container_images record for `bytes` and uploads them in one PATCH; returns status and body.
fn upload(agent: &Agent, name: &str, bytes: &[u8]) -> (u16, Value) {
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let created = http
        .post(&agent.url("/v1/baremetalcluster/acme/edge-1/container_images"))
        .header("Authorization", &auth)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": name, "image_length": bytes.len()}).to_string())
        .unwrap();
    assert_eq!(created.status(), 201);
    http.patch(&agent.url(&format!(
        "/v1/baremetalcluster/acme/edge-1/container_images/{name}"
    )))
    .header("Authorization", &auth)
    .header("Upload-Offset", "0")
    .send(bytes)
    .unwrap();
    let record = http
        .get(&agent.url(&format!(
            "/v1/baremetalcluster/acme/edge-1/container_images/{name}"
        )))
        .call()
        .unwrap();
    let status = record.status().as_u16();
    (
        status,
        serde_json::from_str(&record.into_body().read_to_string().unwrap()).unwrap(),
    )
}

#[test]
fn skopeo_made_archives_import_and_pull_back_by_skopeo_and_ctr() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 11, &[300_000, 150_000], "1.0");

    let docker_tar = tmp.path().join("app.tar");
    let oci_tar = tmp.path().join("tool.tar");
    let skopeo_copy = |to: String| {
        run(Command::new(tool("skopeo"))
            .args(["copy", "--quiet", &format!("oci:{}:1.0", src.display())])
            .arg(to));
    };
    skopeo_copy(format!(
        "docker-archive:{}:foothold/app:v1",
        docker_tar.display()
    ));
    skopeo_copy(format!(
        "oci-archive:{}:quay.io/foothold/tool:v2",
        oci_tar.display()
    ));

    let (status, record) = upload(&agent, "app.tar", &std::fs::read(&docker_tar).unwrap());
    assert_eq!(status, 200);
    assert_eq!(record["upload_complete"], true, "{record}");
    let imported = &record["imported"];
    assert_eq!(imported[0]["repo"], "docker.io/foothold/app", "{record}");
    assert_eq!(imported[0]["tag"], "v1");
    let app_digest = imported[0]["digest"].as_str().unwrap().to_owned();

    let (_, record) = upload(&agent, "tool.tar", &std::fs::read(&oci_tar).unwrap());
    assert_eq!(record["upload_complete"], true, "{record}");
    assert_eq!(
        record["imported"][0]["repo"], "quay.io/foothold/tool",
        "{record}"
    );
    let tool_digest = record["imported"][0]["digest"].as_str().unwrap().to_owned();
    // An oci-archive carries its manifest as is.
    assert_eq!(tool_digest, image.manifest_digest);

    // skopeo: the manifest the registry serves is the one the record names, and a full copy verifies
    // every layer's digest.
    let creds = format!("foothold:{TOKEN}");
    let plain = ["--tls-verify=false", "--creds", creds.as_str()];
    for (name, digest) in [
        ("docker.io/foothold/app:v1", &app_digest),
        ("quay.io/foothold/tool:v2", &tool_digest),
    ] {
        let reference = format!("{}/{name}", agent.host());
        assert_eq!(
            &remote_manifest_digest(&plain, &reference),
            digest,
            "{name}"
        );
        let out = tmp
            .path()
            .join(format!("pulled-{}", digest.replace(':', "-")));
        run(Command::new(tool("skopeo"))
            .args([
                "copy",
                "--quiet",
                "--src-tls-verify=false",
                "--src-creds",
                &creds,
            ])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:x", out.display())));
    }

    // containerd, through the generated mirror configuration, by original names.
    let hosts = mirror_hosts(&agent, "docker.io,quay.io", tmp.path());
    let ctd = Containerd::start(&tmp.path().join("containerd"));
    let hosts_dir = hosts.to_str().unwrap();
    for name in ["docker.io/foothold/app:v1", "quay.io/foothold/tool:v2"] {
        run(&mut ctd.ctr(&["images", "pull", "--hosts-dir", hosts_dir, name]));
    }
    let listed = stdout(&mut ctd.ctr(&["images", "ls"]));
    for (name, digest) in [
        ("docker.io/foothold/app:v1", &app_digest),
        ("quay.io/foothold/tool:v2", &tool_digest),
    ] {
        let line = listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{listed}"));
        assert!(line.contains(digest.as_str()), "{line}");
    }
    drop(ctd);
    drop(agent);
    assert_fsck_clean(&tmp.path().join("data"));
}

// ---- archives built by hand, for the refusal table ----

fn header(name: &[u8], kind: tar::EntryType, size: u64, link: &[u8]) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    // Raw fields: tar's own setters refuse the malicious names this table needs.
    let old = h.as_old_mut();
    old.name = [0; 100];
    old.name[..name.len()].copy_from_slice(name);
    old.linkname = [0; 100];
    old.linkname[..link.len()].copy_from_slice(link);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h.set_entry_type(kind);
    h.set_cksum();
    h
}

#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    fn file(mut self, name: &str, data: &[u8]) -> Self {
        self.0.extend_from_slice(
            header(
                name.as_bytes(),
                tar::EntryType::Regular,
                data.len() as u64,
                b"",
            )
            .as_bytes(),
        );
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len().div_ceil(512) * 512, 0);
        self
    }
    fn link(mut self, name: &str, kind: tar::EntryType, target: &str) -> Self {
        self.0
            .extend_from_slice(header(name.as_bytes(), kind, 0, target.as_bytes()).as_bytes());
        self
    }
    fn special(mut self, name: &str, kind: tar::EntryType) -> Self {
        self.0
            .extend_from_slice(header(name.as_bytes(), kind, 0, b"").as_bytes());
        self
    }
    fn end(mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0; 1024]);
        self.0
    }
}

fn hex_sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A small docker-archive in the legacy layout (layer under `<id>/layer.tar`, reached through a symlink
/// from a second directory, as `docker save` writes shared layers), plus its parts for variants.
struct DockerParts {
    layer: Vec<u8>,
    config: Vec<u8>,
}

fn docker_parts() -> DockerParts {
    let mut inner = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    h.set_cksum();
    inner
        .append_data(&mut h, "hello.txt", &b"hello"[..])
        .unwrap();
    let layer = inner.into_inner().unwrap();
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", hex_sha(&layer))]},
    })
    .to_string()
    .into_bytes();
    DockerParts { layer, config }
}

fn docker_manifest(config: &str, tags: Value, layers: &[&str]) -> Vec<u8> {
    json!([{"Config": config, "RepoTags": tags, "Layers": layers}])
        .to_string()
        .into_bytes()
}

fn valid_docker(p: &DockerParts) -> Tar {
    let cfg = format!("{}.json", hex_sha(&p.config));
    Tar::default()
        .file("aaaa/layer.tar", &p.layer)
        .link(
            "bbbb/layer.tar",
            tar::EntryType::Symlink,
            "../aaaa/layer.tar",
        )
        .file(&cfg, &p.config)
        .file(
            "manifest.json",
            &docker_manifest(&cfg, json!(["foothold/hello:1"]), &["bbbb/layer.tar"]),
        )
}

async fn upload_inproc(app: &axum::Router, name: &str, bytes: Vec<u8>) -> inproc::Resp {
    let base = "/v1/baremetalcluster/o/c/container_images";
    let len = bytes.len();
    let r = call(
        app,
        Method::POST,
        base,
        &[("content-type", "application/json")],
        json!({"image_name": name, "image_length": len}).to_string(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    call(
        app,
        Method::PATCH,
        &format!("{base}/{name}"),
        &[("upload-offset", "0")],
        bytes,
        true,
    )
    .await
}

#[tokio::test]
async fn malicious_and_broken_archives_import_nothing() {
    let p = docker_parts();
    let cfg = format!("{}.json", hex_sha(&p.config));
    let good = valid_docker(&p).end();
    let cut = good[..1024 + 200].to_vec(); // inside aaaa/layer.tar's data
    let oci_blob = b"{\"schemaVersion\":2}".to_vec();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "absolute",
            valid_docker(&p).file("/etc/cron.d/evil", b"x").end(),
            "is an absolute path",
        ),
        (
            "dotdot",
            valid_docker(&p).file("a/../../evil", b"x").end(),
            "contains `..`",
        ),
        (
            "symlink-out",
            valid_docker(&p)
                .link(
                    "cccc/layer.tar",
                    tar::EntryType::Symlink,
                    "../../etc/shadow",
                )
                .end(),
            "links out of the archive",
        ),
        (
            "symlink-absolute",
            valid_docker(&p)
                .link("cccc/layer.tar", tar::EntryType::Symlink, "/etc/shadow")
                .end(),
            "links to the absolute path",
        ),
        (
            "hardlink-out",
            valid_docker(&p)
                .link("dddd", tar::EntryType::Link, "../outside")
                .end(),
            "links out of the archive",
        ),
        (
            "device",
            valid_docker(&p)
                .special("dev/sda", tar::EntryType::Block)
                .end(),
            "only files, directories and links",
        ),
        ("truncated", cut, "is cut off"),
        (
            "missing-layer",
            Tar::default()
                .file(&cfg, &p.config)
                .file(
                    "manifest.json",
                    &docker_manifest(&cfg, json!(["foothold/hello:1"]), &["nope/layer.tar"]),
                )
                .end(),
            "no file \"nope/layer.tar\"",
        ),
        (
            "link-loop",
            Tar::default()
                .file(&cfg, &p.config)
                .link("a", tar::EntryType::Symlink, "b")
                .link("b", tar::EntryType::Symlink, "a")
                .file(
                    "manifest.json",
                    &docker_manifest(&cfg, json!(["foothold/hello:1"]), &["a"]),
                )
                .end(),
            "or loop",
        ),
        (
            "no-tags",
            Tar::default()
                .file("aaaa/layer.tar", &p.layer)
                .file(&cfg, &p.config)
                .file(
                    "manifest.json",
                    &docker_manifest(&cfg, json!(null), &["aaaa/layer.tar"]),
                )
                .end(),
            "has no RepoTags",
        ),
        (
            "bad-name",
            Tar::default()
                .file("aaaa/layer.tar", &p.layer)
                .file(&cfg, &p.config)
                .file(
                    "manifest.json",
                    &docker_manifest(&cfg, json!(["Foothold/Hello:1"]), &["aaaa/layer.tar"]),
                )
                .end(),
            "RepoTag \"Foothold/Hello:1\"",
        ),
        (
            "oci-lying-blob",
            Tar::default()
                .file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)
                .file(&format!("blobs/sha256/{}", "0".repeat(64)), &oci_blob)
                .file("index.json", br#"{"schemaVersion":2,"manifests":[]}"#)
                .end(),
            "the archive is corrupt",
        ),
        (
            "oci-lying-sha512-blob",
            // 141-byte name: a GNU long-name entry, which the hand-made headers cannot carry.
            {
                let mut t = tar::Builder::new(Vec::new());
                for (name, data) in [
                    ("oci-layout", &br#"{"imageLayoutVersion":"1.0.0"}"#[..]),
                    (&format!("blobs/sha512/{}", "0".repeat(128)), &oci_blob),
                    ("index.json", br#"{"schemaVersion":2,"manifests":[]}"#),
                ] {
                    let mut h = tar::Header::new_gnu();
                    h.set_size(data.len() as u64);
                    h.set_mode(0o644);
                    t.append_data(&mut h, name, data).unwrap();
                }
                t.into_inner().unwrap()
            },
            "the archive is corrupt",
        ),
        (
            "not-an-archive",
            b"this is not a tar archive at all, just some text that is long enough".repeat(20),
            "not a valid tar file",
        ),
    ];
    for (name, bytes, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let app = inproc::app(dir.path());
        let r = upload_inproc(&app, name, bytes).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{name}: {:?}",
            r.json()
        );
        assert_eq!(r.json()["error"]["code"], "ARCHIVE_INVALID", "{name}");
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(reason), "{name}: {message}");
        // The record starts over; the registry has nothing; no blob is left.
        let rec = inproc::get(
            &app,
            &format!("/v1/baremetalcluster/o/c/container_images/{name}"),
        )
        .await;
        assert_eq!(rec.json()["upload_complete"], false, "{name}");
        assert_eq!(rec.json()["image_offset"], 0, "{name}");
        let catalog = call(&app, Method::GET, "/v2/_catalog", &[], Body::empty(), true).await;
        assert_eq!(catalog.json()["repositories"], json!([]), "{name}");
        assert_eq!(inproc::stored_blobs(dir.path()), 0, "{name}");
        inproc::assert_fsck_clean(dir.path());
    }

    // The valid archive the table varies imports, through its symlinked layer.
    let dir = tempfile::tempdir().unwrap();
    let app = inproc::app(dir.path());
    let r = upload_inproc(&app, "good", good).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.json());
    let rec = inproc::get(&app, "/v1/baremetalcluster/o/c/container_images/good").await;
    assert_eq!(rec.json()["upload_complete"], true, "{:?}", rec.json());
    assert_eq!(
        rec.json()["imported"][0]["repo"],
        "docker.io/foothold/hello"
    );
    let m = call(
        &app,
        Method::GET,
        "/v2/docker.io/foothold/hello/manifests/1",
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!(m.status, StatusCode::OK);
    assert_eq!(
        inproc::digest(&m.body),
        rec.json()["imported"][0]["digest"].as_str().unwrap()
    );
    let layer = &m.json()["layers"][0];
    assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar");
    assert_eq!(layer["digest"], format!("sha256:{}", hex_sha(&p.layer)));
    // Kept: the archive (the record's content), config, layer, manifest. The archive's own manifest.json
    // is not kept.
    assert_eq!(inproc::stored_blobs(dir.path()), 4);
    inproc::assert_fsck_clean(dir.path());
}

/// An oci-archive whose blobs are named by sha512 imports under those digests (one that lies about a sha512
/// name is in `malicious_and_broken_archives_import_nothing`).
#[test]
fn sha512_oci_archives_import_under_sha512_digests() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("layout");
    let image = layout::write_image_with(
        layout::Algo::Sha512,
        &src,
        41,
        &[30_000],
        "quay.io/foothold/five:v1",
    );
    let tar_of = |dir: &std::path::Path| {
        let mut t = tar::Builder::new(Vec::new());
        t.append_dir_all(".", dir).unwrap();
        t.into_inner().unwrap()
    };
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let (status, record) = upload(&agent, "five.tar", &tar_of(&src));
    assert_eq!(status, 200, "{record}");
    assert_eq!(
        record["imported"][0]["digest"], image.manifest_digest,
        "{record}"
    );

    drop(agent);
    assert_fsck_clean(&tmp.path().join("data"));
}
