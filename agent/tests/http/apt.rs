//! The signed apt repository against Debian's own apt and dpkg (the host's, pointed at a private root with
//! `APT_CONFIG`, so nothing of the host's package state is touched): packages built with `dpkg-deb`, uploaded
//! as `binary_images` records, installed with `apt-get install` after `apt-get update` checked the
//! repository's signature with the key `foothold-agent apt-source` printed. A second version replaces the
//! index atomically (a reader that follows `InRelease` to the `Packages` it names by hash never misses),
//! a tampered `Packages` or `InRelease` is refused by apt, and a `.deb` record that is not a package is refused
//! when it completes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, Agent};

const TOKEN: &str = "apt-token";

/// A package `hello-foothold` of `version` (architecture all) holding /usr/share/hello-foothold/version.
fn build_deb(dir: &Path, version: &str) -> Vec<u8> {
    let root = dir.join(format!("pkg-{version}"));
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/share/hello-foothold")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: hello-foothold\nVersion: {version}\nArchitecture: all\nMaintainer: Foothold <dev@foothold.invalid>\nDescription: a package for Foothold's apt test\n"
        ),
    )
    .unwrap();
    std::fs::write(root.join("usr/share/hello-foothold/version"), version).unwrap();
    let deb = dir.join(format!("hello-foothold_{version}_all.deb"));
    support::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&root)
            .arg(&deb),
    );
    std::fs::read(deb).unwrap()
}

/// Uploads `bytes` as the binary_images record `name` of acme/edge-1; returns the answer to the last PATCH.
fn upload(agent: &Agent, name: &str, bytes: &[u8]) -> (u16, Value) {
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/binary_images");
    let r = http
        .post(&base)
        .header("Authorization", &auth)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": name, "image_length": bytes.len()}).to_string())
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .patch(&format!("{base}/{name}"))
        .header("Authorization", &auth)
        .header("Upload-Offset", "0")
        .send(bytes)
        .unwrap();
    let status = r.status().as_u16();
    let text = r.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(agent: &Agent, path: &str) -> (u16, Vec<u8>) {
    let r = support::http().get(&agent.url(path)).call().unwrap();
    let status = r.status().as_u16();
    (status, r.into_body().read_to_vec().unwrap_or_default())
}

/// The hex of `support::sha256_digest`: what a Release and a by-hash path name.
fn sha256_hex(bytes: &[u8]) -> String {
    support::sha256_digest(bytes)["sha256:".len()..].to_owned()
}

/// A private root for apt and dpkg: its own sources, lists, cache and dpkg database.
struct AptRoot {
    root: PathBuf,
    config: PathBuf,
}

impl AptRoot {
    fn new(dir: &Path) -> AptRoot {
        let root = dir.join("root");
        for d in [
            "etc/apt/sources.list.d",
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg/info",
            "var/lib/dpkg/updates",
            "var/log/apt",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
        std::fs::write(root.join("etc/apt/sources.list"), "").unwrap();
        let r = root.display();
        let config = dir.join("apt.conf");
        std::fs::write(
            &config,
            format!(
                "Dir \"{r}/\";\nDir::State::status \"{r}/var/lib/dpkg/status\";\nDebug::NoLocking \"true\";\n\
                 APT::Architecture \"amd64\";\nAcquire::Languages \"none\";\nAcquire::Retries \"0\";\n\
                 DPkg::Options {{ \"--root={r}\"; \"--force-not-root\"; \"--log={r}/var/log/dpkg.log\"; }};\n"
            ),
        )
        .unwrap();
        AptRoot { root, config }
    }

    fn apt_get(&self, args: &[&str]) -> Output {
        Command::new("apt-get")
            .env("APT_CONFIG", &self.config)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["-q", "-y"])
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.apt_get(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "cp {}/var/lib/apt/lists/partial/*InRelease /tmp/aptdbg/failed-InRelease",
                    self.root.display()
                ))
                .status();
        }
        assert!(out.status.success(), "apt-get {args:?}:\n{text}");
        text
    }

    /// `apt-get update` on empty lists (as a fresh node has, and as apt has for an index it does not hold
    /// yet) must fail; returns what it said.
    fn update_fails(&self) -> String {
        let lists = self.root.join("var/lib/apt/lists");
        std::fs::remove_dir_all(&lists).unwrap();
        std::fs::create_dir_all(lists.join("partial")).unwrap();
        let out = self.apt_get(&["update"]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // apt-get update exits 0 on some fetch failures; its E: lines are the verdict.
        assert!(!out.status.success() || text.contains("E: "), "{text}");
        text
    }

    fn installed_version(&self) -> String {
        std::fs::read_to_string(self.root.join("usr/share/hello-foothold/version")).unwrap()
    }
}

fn wait_for_version(agent: &Agent, version: &str) -> Vec<u8> {
    support::wait_for(
        &format!("Packages with version {version}"),
        Duration::from_secs(30),
        || {
            let (status, body) = get(agent, "/apt/dists/foothold/main/binary-amd64/Packages");
            let text = String::from_utf8_lossy(&body).into_owned();
            (status == 200 && text.contains(&format!("Version: {version}\n"))).then_some(body)
        },
    )
}

#[test]
fn apt_installs_signed_packages_from_the_agent_and_refuses_tampering() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let agent = Agent::start(&data, Some(TOKEN));

    // The empty repository is signed and served from the start.
    let (status, in_release) = get(&agent, "/apt/dists/foothold/InRelease");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&in_release).starts_with("-----BEGIN PGP SIGNED MESSAGE-----"));

    let v1 = build_deb(tmp.path(), "1.0");
    let (status, body) = upload(&agent, "hello-foothold_1.0_all.deb", &v1);
    assert_eq!(status, 204, "{body}");
    wait_for_version(&agent, "1.0");

    // The node's source: what `apt-source` prints (the data directory is the running agent's: it reads the key
    // file) is what /apt/foothold.sources serves.
    let entry = support::stdout(
        Command::new(support::agent_bin())
            .args(["apt-source", "--endpoint", &agent.url(""), "--data"])
            .arg(&data),
    );
    assert!(
        entry.contains(&format!("URIs: {}/apt\n", agent.url(""))),
        "{entry}"
    );
    assert!(
        entry.contains("Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n"),
        "{entry}"
    );
    let (_, served) = get(&agent, "/apt/foothold.sources");
    assert_eq!(String::from_utf8_lossy(&served), entry);
    // The Host is written into the entry as the repository's URL: anything but host[:port] is refused.
    for host in ["user@evil:80", "a b", ""] {
        let (code, answer) = crate::hostile::raw(
            &agent,
            &format!(
                "GET /apt/foothold.sources HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(code, 400, "Host {host:?}: {answer}");
        assert!(answer.contains("\"INVALID_REQUEST\""), "{answer}");
    }

    let apt = AptRoot::new(tmp.path());
    std::fs::write(
        apt.root.join("etc/apt/sources.list.d/foothold.sources"),
        &entry,
    )
    .unwrap();
    apt.ok(&["update"]);
    let out = apt.ok(&["install", "hello-foothold"]);
    assert!(out.contains("Setting up hello-foothold (1.0)"), "{out}");
    assert_eq!(apt.installed_version(), "1.0");

    // A second version, while a reader follows InRelease to the Packages it names (by hash) without a miss.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, base) = (stop.clone(), agent.url(""));
        std::thread::spawn(move || {
            let http = support::http();
            let mut reads = 0u32;
            while !stop.load(Ordering::Relaxed) || reads < 20 {
                let release = http
                    .get(&format!("{base}/apt/dists/foothold/InRelease"))
                    .call()
                    .unwrap()
                    .into_body()
                    .read_to_string()
                    .unwrap();
                let line = release
                    .lines()
                    .find(|l| l.ends_with(" main/binary-amd64/Packages"))
                    .unwrap_or_else(|| panic!("no Packages in\n{release}"))
                    .to_owned();
                let hash = line.split_whitespace().next().unwrap();
                let r = http
                    .get(&format!(
                        "{base}/apt/dists/foothold/main/binary-amd64/by-hash/SHA256/{hash}"
                    ))
                    .call()
                    .unwrap();
                assert_eq!(r.status(), 200, "{line}");
                assert_eq!(sha256_hex(&r.into_body().read_to_vec().unwrap()), hash);
                reads += 1;
            }
            reads
        })
    };
    let v2 = build_deb(tmp.path(), "2.0");
    let (status, body) = upload(&agent, "hello-foothold_2.0_all.deb", &v2);
    assert_eq!(status, 204, "{body}");
    let packages = wait_for_version(&agent, "2.0");
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() >= 20);
    assert!(String::from_utf8_lossy(&packages).contains("Version: 1.0\n"));
    apt.ok(&["update"]);
    let out = apt.ok(&["install", "hello-foothold"]);
    assert!(
        out.contains("Unpacking hello-foothold (2.0) over (1.0)"),
        "{out}"
    );
    assert_eq!(apt.installed_version(), "2.0");

    // Tampered Packages (by hash, where apt fetches it): refused against the signed Release.
    let hash = sha256_hex(&packages);
    let stored = data.join("apt/by-hash/SHA256").join(&hash);
    let good = std::fs::read(&stored).unwrap();
    std::fs::write(
        &stored,
        String::from_utf8_lossy(&good).replace("Version: 2.0", "Version: 9.0"),
    )
    .unwrap();
    let said = apt.update_fails();
    assert!(
        said.contains("Hash Sum mismatch") || said.contains("unexpected size"),
        "{said}"
    );
    std::fs::write(&stored, &good).unwrap();
    apt.ok(&["update"]);

    // Tampered InRelease: refused by its signature.
    let current = data.join("apt/current/InRelease");
    let signed = std::fs::read_to_string(&current).unwrap();
    let forged = signed.replace("Label: Foothold", "Label: Forged!");
    assert_ne!(forged, signed);
    std::fs::write(&current, forged).unwrap();
    let said = apt.update_fails();
    assert!(said.contains("BADSIG"), "{said}");
    std::fs::write(&current, signed).unwrap();
    // apt resumed the forged InRelease it held in part: only a strong ETag may continue a range (the
    // restored file has the same Last-Modified second and would have been spliced onto the forged part).
    let r = support::http()
        .get(&agent.url("/apt/dists/foothold/InRelease"))
        .call()
        .unwrap();
    let (etag, modified) = (
        r.headers()["etag"].to_str().unwrap().to_owned(),
        r.headers()["last-modified"].to_str().unwrap().to_owned(),
    );
    for (validator, status) in [(&modified, 200), (&etag, 206)] {
        let r = support::http()
            .get(&agent.url("/apt/dists/foothold/InRelease"))
            .header("Range", "bytes=10-")
            .header("If-Range", validator)
            .call()
            .unwrap();
        assert_eq!(r.status(), status, "If-Range: {validator}");
    }
    apt.ok(&["update"]);

    // A record named .deb that is not a package is refused when it completes, and the index stays.
    let (status, body) = upload(&agent, "junk_1.0_all.deb", b"not a package at all");
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("ARCHIVE_INVALID")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a .deb"),
        "{body}"
    );
    let (_, now) = get(&agent, "/apt/dists/foothold/main/binary-amd64/Packages");
    assert_eq!(now, packages);
    // What is not in the repository is not served from its pool.
    let (status, _) = get(
        &agent,
        &format!("/apt/pool/{}/junk_1.0_all.deb", "0".repeat(64)),
    );
    assert_eq!(status, 404);
}
