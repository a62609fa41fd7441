//! Container images by reference and digest, end to end: a foothold-agent on 127.0.0.1 serves a two-platform
//! image and a single-manifest one (seeded random layers). `foothold-build fetch` pulls them with oci-client into
//! a fresh cache: linux/amd64 only, resuming a half-downloaded layer, every blob verified. A second fetch with the
//! registry gone makes no request. `foothold-build build` puts them into an image's data partition; that
//! partition, read back with debugfs and served by another agent, gives skopeo the pinned digests, and the
//! platform left out answers MANIFEST_UNKNOWN. (A booted image's HTTPS (`agentTls`) with the certificate
//! made at first boot is checked on the appliance's boot: `appliance.rs`.) `foothold-build pin` resolves the same registry's tags, and a file server's urls, into a spec.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use foothold_e2e::{build_binaries, free_port, http_code, run, sha256_file, target};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

mod pin;
mod private_registry;

/// A server started by a test (a foothold-agent, a registry, a file server) on 127.0.0.1, killed on drop.
struct Server {
    child: Child,
    /// `127.0.0.1:<port>`.
    host: String,
}

impl Server {
    /// Starts `cmd` (which listens on `host`) and waits, at most 30 s, until `up(host)`.
    fn start(what: &str, cmd: &mut Command, host: String, up: impl Fn(&str) -> bool) -> Server {
        let child = cmd.stdout(Stdio::null()).spawn().unwrap();
        let mut server = Server { child, host };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !up(&server.host) {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("{what} exited before it was up: {status}");
            }
            assert!(Instant::now() < deadline, "{what} not up in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// A foothold-agent serving `data`.
    fn agent(data: &Path) -> Server {
        let host = format!("127.0.0.1:{}", free_port());
        Server::start(
            "foothold-agent",
            Command::new(target().join("debug/foothold-agent"))
                .args(["serve", "--no-controllers", "--listen", &host, "--data"])
                .arg(data)
                .stderr(Stdio::null()),
            host,
            |host| http_code(&[&format!("http://{host}/readyz")]) == "200",
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic bytes (xorshift) so that the layers' digests are the same on every run.
fn seeded(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The digest algorithms OCI registers: the test names one image's content by sha512.
#[derive(Clone, Copy, PartialEq)]
enum Alg {
    Sha256,
    Sha512,
}

fn digest_as(alg: Alg, bytes: &[u8]) -> String {
    match alg {
        Alg::Sha256 => digest(bytes),
        Alg::Sha512 => format!("sha512:{}", hex::encode(sha2::Sha512::digest(bytes))),
    }
}

/// `<algorithm>/<hex>` of a digest: where an OCI layout (or the builder's cache) keeps its content.
fn blob_rel(digest: &str) -> String {
    digest.replacen(':', "/", 1)
}

/// Writes a blob into the layout; returns its descriptor.
fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
    blob_as(layout, Alg::Sha256, media_type, bytes)
}

fn blob_as(layout: &Path, alg: Alg, media_type: &str, bytes: &[u8]) -> Value {
    let d = digest_as(alg, bytes);
    std::fs::write(layout.join("blobs").join(blob_rel(&d)), bytes).unwrap();
    json!({"mediaType": media_type, "digest": d, "size": bytes.len()})
}

/// An image manifest for `arch` with two layers; returns its descriptor and its layers' descriptors.
fn image(layout: &Path, arch: &str, seed: u64) -> (Value, Vec<Value>) {
    image_as(layout, Alg::Sha256, arch, seed)
}

/// [`image`], its content named by `alg`.
fn image_as(layout: &Path, alg: Alg, arch: &str, seed: u64) -> (Value, Vec<Value>) {
    let blob =
        |layout: &Path, media_type: &str, bytes: &[u8]| blob_as(layout, alg, media_type, bytes);
    let layers: Vec<Value> = (0..2)
        .map(|i| {
            blob(
                layout,
                "application/vnd.oci.image.layer.v1.tar",
                &seeded(seed * 10 + i, 300_000 + 1000 * i as usize),
            )
        })
        .collect();
    let config = json!({
        "architecture": arch, "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l["digest"].clone()).collect::<Vec<_>>()},
    });
    let config = blob(
        layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    });
    let d = blob(
        layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    (d, layers)
}

/// Makes `layout` an OCI image layout whose index lists `manifests`.
fn write_index(layout: &Path, manifests: &[Value]) {
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(
        layout.join("index.json"),
        json!({"schemaVersion": 2, "manifests": manifests}).to_string(),
    )
    .unwrap();
}

struct Source {
    index: Value,
    amd64: Value,
    amd64_layers: Vec<Value>,
    arm64: Value,
    arm64_layers: Vec<Value>,
    single: Value,
    /// An image whose manifest, config and layers are named by sha512.
    long: Value,
    long_layers: Vec<Value>,
}

/// The registry's content: `docker.io/lab/multi:2` (an index: linux/amd64 and linux/arm64/v8) and
/// `docker.io/lab/single:1` (one image manifest), and `docker.io/lab/long:1` (one image, named by sha512).
fn source_layout(layout: &Path) -> Source {
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    std::fs::create_dir_all(layout.join("blobs/sha512")).unwrap();
    let (amd64, amd64_layers) = image(layout, "amd64", 1);
    let (arm64, arm64_layers) = image(layout, "arm64", 2);
    let (single, _) = image(layout, "amd64", 3);
    let (long, long_layers) = image_as(layout, Alg::Sha512, "amd64", 4);
    let mut a = amd64.clone();
    a["platform"] = json!({"os": "linux", "architecture": "amd64"});
    let mut b = arm64.clone();
    b["platform"] = json!({"os": "linux", "architecture": "arm64", "variant": "v8"});
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [a, b],
    });
    let index = blob(
        layout,
        "application/vnd.oci.image.index.v1+json",
        index.to_string().as_bytes(),
    );
    let named = |d: &Value, name: &str| {
        let mut d = d.clone();
        d["annotations"] = json!({"io.containerd.image.name": name});
        d
    };
    write_index(
        layout,
        &[
            named(&index, "docker.io/lab/multi:2"),
            named(&single, "docker.io/lab/single:1"),
            named(&long, "docker.io/lab/long:1"),
        ],
    );
    Source {
        index,
        amd64,
        amd64_layers,
        arm64,
        arm64_layers,
        single,
        long,
        long_layers,
    }
}

fn cached(cache: &Path, d: &Value) -> PathBuf {
    cache
        .join("oci/blobs")
        .join(blob_rel(d["digest"].as_str().unwrap()))
}

fn http_status(url: &str, accept: &str) -> String {
    http_code(&["-H", &format!("Accept: {accept}"), url])
}

#[test]
fn images_are_pulled_by_digest_cached_and_served_from_the_built_image() {
    if !foothold_e2e::deadline::budget_allows(
        "container_images",
        std::time::Duration::from_secs(900),
    ) {
        return;
    }
    let deadline = foothold_e2e::Deadline::start("container_images", Duration::from_secs(2400));
    deadline.phase("build the binaries");
    build_binaries();
    deadline.phase("the registry, the spec, a half-fetched layer");
    let agent_bin = target().join("debug/foothold-agent");
    let build_bin = target().join("debug/foothold-build");
    let tmp = tempfile::tempdir_in(target()).unwrap();
    let dir = tmp.path();

    // The registry.
    let src = source_layout(&dir.join("layout"));
    let registry_data = dir.join("registry");
    run(Command::new(&agent_bin)
        .arg("import")
        .arg(dir.join("layout"))
        .arg("--data")
        .arg(&registry_data));
    let registry = Server::agent(&registry_data);

    // The spec: served under other registries' names, pulled from ours.
    let spec = dir.join("spec.yaml");
    std::fs::write(
        &spec,
        format!(
            r#"name: images-test
base:
  suite: bookworm
  mirror: http://deb.debian.org/debian
  packages: [openssh-server]
hostname: images-test
components:
  agent:
    path: {agent}
  agentArgs: [--no-controllers]
  agentTls: true
  images:
    - reference: quay.io/lab/multi:2
      digest: {index}
      source: {host}/docker.io/lab/multi
    - reference: registry.example/lab/single@{single}
      digest: {single}
      source: {host}/docker.io/lab/single
    - reference: registry.example/lab/long:1
      digest: {long}
      source: {host}/docker.io/lab/long
outputs:
  formats: [raw]
  diskSize: 3GiB
  dataSize: 64MiB
  compression: xz
  compressionLevel: 1
"#,
            agent = agent_bin.display(),
            index = src.index["digest"].as_str().unwrap(),
            single = src.single["digest"].as_str().unwrap(),
            long = src.long["digest"].as_str().unwrap(),
            host = registry.host,
        ),
    )
    .unwrap();

    // A fresh image cache that shares the machine's root file system and package caches.
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let home_cache = foothold_e2e::builder_cache();
    for sub in ["rootfs", "debs"] {
        std::fs::create_dir_all(home_cache.join(sub)).unwrap();
        std::os::unix::fs::symlink(home_cache.join(sub), cache.join(sub)).unwrap();
    }
    // Half of the first amd64 layer, as an interrupted fetch leaves it.
    let first = &src.amd64_layers[0];
    let whole = std::fs::read(
        dir.join("layout/blobs/sha256").join(
            first["digest"]
                .as_str()
                .unwrap()
                .trim_start_matches("sha256:"),
        ),
    )
    .unwrap();
    std::fs::create_dir_all(cache.join("oci/blobs/sha256")).unwrap();
    std::fs::write(
        cache.join("oci/blobs/sha256").join(format!(
            ".{}.partial",
            first["digest"]
                .as_str()
                .unwrap()
                .trim_start_matches("sha256:")
        )),
        &whole[..whole.len() / 2],
    )
    .unwrap();

    deadline.phase("fetch: linux/amd64 only, resumed, verified; a cache hit offline");
    let registry_host = registry.host.clone();
    let fetch = |cache: &Path| {
        run(Command::new(&build_bin)
            .arg("fetch")
            .arg(&spec)
            .arg("--cache")
            .arg(cache)
            .args(["--json", "--insecure-registry", &registry_host]))
    };
    let events = fetch(&cache);
    assert!(
        events.contains("quay.io/lab/multi:2: 5 of 5 blobs downloaded")
            && events.contains("1 resumed"),
        "{events}"
    );
    assert!(
        events.contains("registry.example/lab/single@sha256:")
            && events.contains("4 of 4 blobs downloaded"),
        "{events}"
    );
    assert!(
        events.contains("registry.example/lab/long:1: 4 of 4 blobs downloaded"),
        "{events}"
    );
    // linux/amd64 and the index are there, verified; linux/arm64 is not. The sha512 image is kept under
    // blobs/sha512, each file checked against its sha512.
    for d in [&src.index, &src.amd64, &src.single, &src.long]
        .into_iter()
        .chain(&src.amd64_layers)
        .chain(&src.long_layers)
    {
        let p = cached(&cache, d);
        let want = d["digest"].as_str().unwrap();
        let alg = if want.starts_with("sha512:") {
            Alg::Sha512
        } else {
            Alg::Sha256
        };
        assert_eq!(
            digest_as(alg, &std::fs::read(&p).unwrap()),
            want,
            "{}",
            p.display()
        );
    }
    for d in std::iter::once(&src.arm64).chain(&src.arm64_layers) {
        assert!(!cached(&cache, d).exists(), "arm64 {d} was pulled");
    }
    let leftovers: Vec<_> = std::fs::read_dir(cache.join("oci/blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "partial files left: {leftovers:?}");

    // A cache hit needs no registry.
    drop(registry);
    let events = fetch(&cache);
    assert!(
        events.contains("3 images") && !events.contains("pulling"),
        "{events}"
    );
    // A blob gone from the cache is fetched again: with the registry gone, that fails and names the image.
    let layer = cached(&cache, &src.single);
    let good = std::fs::read(&layer).unwrap();
    std::fs::remove_file(&layer).unwrap();
    let out = Command::new(&build_bin)
        .arg("fetch")
        .arg(&spec)
        .arg("--cache")
        .arg(&cache)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("components.images[1]"),
        "{err}"
    );
    std::fs::write(&layer, good).unwrap();

    deadline.phase("the image's Debian base (bookworm)");
    // This image is on bookworm (the others on trixie: the builder makes either): its Debian base is made first,
    // as any build would, so that the offline build below finds it in the cache.
    let loaded = foothold_image_builder::spec::load(&spec).unwrap();
    foothold_image_builder::build::rootfs(
        &loaded,
        &foothold_image_builder::build::Settings {
            out: dir.join("out"),
            cache: cache.clone(),
            agent: None,
            source_date_epoch: 1_767_225_600,
            formats: None,
            offline: false,
            pull: Default::default(),
        },
        &foothold_image_builder::progress::Progress::new(false),
    )
    .unwrap();

    deadline.phase("the image built offline: raw, and .raw.xz");
    // The built image's data partition serves them under their names; the offline build needs no registry.
    let out_dir = dir.join("out");
    run(Command::new(&build_bin)
        .arg("build")
        .arg(&spec)
        .arg("--offline")
        .arg("--cache")
        .arg(&cache)
        .arg("--out")
        .arg(&out_dir));
    let raw = out_dir.join("images-test.raw");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("images-test.raw.manifest.json")).unwrap(),
    )
    .unwrap();
    deadline.phase("xz -d gives back the raw");
    // `compression: xz`: the raw is also written as .raw.xz, whose manifest names the raw it decompresses to;
    // `xz -d` gives back that raw bit for bit (the one booted below).
    let xz = out_dir.join("images-test.raw.xz");
    let xz_manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("images-test.raw.xz.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(xz_manifest["output"]["compression"], "xz");
    // The spec's level, not xz's default 6 (about 200 s here): every block has -1's 1 MiB dictionary.
    assert_eq!(xz_manifest["output"]["compressionLevel"], 1);
    let list = run(Command::new("xz")
        .args(["--robot", "--list", "-vv"])
        .arg(&xz));
    let blocks: Vec<&str> = list.lines().filter(|l| l.starts_with("block\t")).collect();
    let at_1 = !blocks.is_empty() && blocks.iter().all(|b| b.ends_with("--lzma2=dict=1MiB"));
    assert!(at_1, "{} was not written at xz -1: {list}", xz.display());
    assert_eq!(xz_manifest["output"]["sha256"], sha256_file(&xz).as_str());
    let raw_sha256 = sha256_file(&raw);
    assert_eq!(manifest["output"]["sha256"], raw_sha256.as_str());
    assert_eq!(
        xz_manifest["output"]["uncompressed"],
        json!({"file": "images-test.raw", "sha256": raw_sha256, "size": std::fs::metadata(&raw).unwrap().len()})
    );
    assert!(xz_manifest["tools"]["xz"]
        .as_str()
        .is_some_and(|v| v.starts_with("xz (XZ Utils) 5.")));
    let mut xz_d = Command::new("xz")
        .arg("-dc")
        .arg(&xz)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut hasher = Sha256::new();
    std::io::copy(&mut xz_d.stdout.take().unwrap(), &mut hasher).unwrap();
    assert!(xz_d.wait().unwrap().success());
    assert_eq!(
        hex::encode(hasher.finalize()),
        raw_sha256,
        "xz -d of {}",
        xz.display()
    );
    assert_eq!(
        manifest["inputs"]["images[0]"]["digest"],
        src.index["digest"]
    );
    assert_eq!(manifest["inputs"]["images[0]"]["blobs"], 5);
    assert_eq!(
        manifest["inputs"]["images[2]"]["digest"],
        src.long["digest"]
    );
    deadline.phase("the data partition served: skopeo, fsck, the sha512 image");
    let offset = manifest["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "foothold-data")
        .unwrap()["offset"]
        .clone();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump / {}", data.display()))
        .arg(format!("{}?offset={offset}", raw.display())));
    // The partial index is consistent store content, not a problem.
    let report = run(Command::new(&agent_bin)
        .arg("fsck")
        .arg("--data")
        .arg(&data));
    assert!(report.contains(" 0 problems"), "{report}");
    // Every repository the build imported is one only an admin credential writes on the appliance.
    let protected = std::fs::read_to_string(data.join("protected-repositories")).unwrap();
    let listed: Vec<&str> = protected.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        listed,
        [
            "quay.io/lab/multi",
            "registry.example/lab/long",
            "registry.example/lab/single"
        ],
        "{protected}"
    );
    let served = Server::agent(&data);
    let host = &served.host;
    let raw_index = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{host}/quay.io/lab/multi:2"),
    ]));
    assert_eq!(digest(raw_index.as_bytes()), src.index["digest"]);
    let pulled = dir.join("pulled");
    run(Command::new("skopeo").args([
        "copy",
        "-q",
        "--src-tls-verify=false",
        "--override-arch",
        "amd64",
        "--dest-oci-accept-uncompressed-layers",
        &format!("docker://{host}/quay.io/lab/multi:2"),
        &format!("oci:{}:multi", pulled.display()),
    ]));
    // skopeo copied the amd64 manifest unchanged (layers, config and all).
    let pulled_index: Value =
        serde_json::from_slice(&std::fs::read(pulled.join("index.json")).unwrap()).unwrap();
    assert_eq!(pulled_index["manifests"][0]["digest"], src.amd64["digest"]);
    for l in &src.amd64_layers {
        let p = pulled
            .join("blobs/sha256")
            .join(l["digest"].as_str().unwrap().trim_start_matches("sha256:"));
        assert!(p.is_file(), "{} not pulled", l["digest"]);
    }
    let single = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!(
            "docker://{host}/registry.example/lab/single@{}",
            src.single["digest"].as_str().unwrap()
        ),
    ]));
    assert_eq!(digest(single.as_bytes()), src.single["digest"]);
    // The sha512 image: its manifest by tag and by digest, and a layer, byte for byte.
    let long_digest = src.long["digest"].as_str().unwrap();
    for reference in ["1", long_digest] {
        let raw = run(Command::new("curl").args([
            "-fsS",
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
            &format!("http://{host}/v2/registry.example/lab/long/manifests/{reference}"),
        ]));
        assert_eq!(digest_as(Alg::Sha512, raw.as_bytes()), long_digest);
    }
    let layer = &src.long_layers[1];
    let got = Command::new("curl")
        .args([
            "-fsS",
            &format!(
                "http://{host}/v2/registry.example/lab/long/blobs/{}",
                layer["digest"].as_str().unwrap()
            ),
        ])
        .output()
        .unwrap();
    assert!(got.status.success());
    assert_eq!(digest_as(Alg::Sha512, &got.stdout), layer["digest"]);
    let oci = "application/vnd.oci.image.manifest.v1+json";
    assert_eq!(
        http_status(
            &format!(
                "http://{host}/v2/quay.io/lab/multi/manifests/{}",
                src.arm64["digest"].as_str().unwrap()
            ),
            oci
        ),
        "404",
        "the left-out platform"
    );
    assert_eq!(
        http_status(
            &format!(
                "http://{host}/v2/quay.io/lab/multi/manifests/{}",
                src.amd64["digest"].as_str().unwrap()
            ),
            oci
        ),
        "200"
    );
    drop(served);
}
