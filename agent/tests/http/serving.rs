//! The served process around the registry: HTTPS with a site certificate, /metrics, and fsck catching
//! corruption on disk.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use crate::support::{agent_bin, layout, run, stdout, tool, Agent};

/// A P-256 key and a self-signed certificate for 127.0.0.1, as `prefix`cert.pem and `prefix`key.pem in `dir`:
/// a server's certificate (not a CA's, which WebPKI verifiers refuse to see as a server's), as Ironic's is.
fn self_signed(dir: &std::path::Path, prefix: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{prefix}cert.pem")),
        dir.join(format!("{prefix}key.pem")),
    );
    run(Command::new(tool("openssl"))
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    (cert, key)
}

/// An agent serving HTTPS with `cert` and `key`, its data in `data`.
fn https_agent(data: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Agent {
    let mut cmd = Command::new(agent_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key);
    Agent::spawn(cmd, data, None)
}

#[test]
fn serves_https_with_the_given_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(tmp.path(), "");
    let agent = https_agent(&tmp.path().join("data"), &cert, &key);
    // Verified against the certificate: TLS is really on, with the key we gave it.
    let body = stdout(
        Command::new(tool("curl"))
            .args(["-sSf", "--cacert"])
            .arg(&cert)
            .arg(format!("https://{}/v2/", agent.host())),
    );
    assert_eq!(body, "{}");
    // The apt source it hands nodes names it by https, the scheme they reached it by.
    let sources = stdout(
        Command::new(tool("curl"))
            .args(["-sSf", "--cacert"])
            .arg(&cert)
            .arg(format!("https://{}/apt/foothold.sources", agent.host())),
    );
    assert!(
        sources.contains(&format!("\nURIs: https://{}/apt\n", agent.host())),
        "{sources}"
    );
    // And a real client pushes over it.
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 21, &[10_000], "v1");
    let certs_dir = tmp.path().join("certs.d");
    std::fs::create_dir_all(&certs_dir).unwrap();
    std::fs::copy(&cert, certs_dir.join("ca.crt")).unwrap();
    run(Command::new(tool("skopeo"))
        .args(["--insecure-policy", "copy", "--dest-cert-dir"])
        .arg(&certs_dir)
        .arg(format!("oci:{}:v1", src.display()))
        .arg(format!("docker://{}/tls/img:v1", agent.host())));
    let cert_dir = certs_dir.to_str().unwrap();
    let remote = support::remote_manifest_digest(
        &["--cert-dir", cert_dir],
        &format!("{}/tls/img:v1", agent.host()),
    );
    assert_eq!(remote, image.manifest_digest);
    // Under TLS, rustls must see the bytes: blobs are read through mappings, never lent to sendfile.
    let layer = &image.layer_digests[0];
    let fetched = tmp.path().join("layer");
    run(Command::new(tool("curl"))
        .args(["-sSf", "--cacert"])
        .arg(&cert)
        .arg("-o")
        .arg(&fetched)
        .arg(format!("https://{}/v2/tls/img/blobs/{layer}", agent.host())));
    let size = std::fs::metadata(&fetched).unwrap().len();
    assert_eq!(
        support::sha256_digest(&std::fs::read(&fetched).unwrap()),
        *layer
    );
    let metrics = stdout(
        Command::new(tool("curl"))
            .args(["-sSf", "--cacert"])
            .arg(&cert)
            .arg(format!("https://{}/metrics", agent.host())),
    );
    for line in [
        format!("foothold_bytes_served_total{{path=\"mapped\"}} {size}"),
        "foothold_bytes_served_total{path=\"sendfile\"} 0".to_owned(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    // Plain HTTP is not answered on the TLS port.
    let plain = Command::new(tool("curl"))
        .args(["-sf", "--max-time", "5"])
        .arg(format!("http://{}/v2/", agent.host()))
        .output()
        .unwrap();
    assert!(!plain.status.success());
}

/// `/readyz` probes a service on HTTPS (here another agent) verified against `--ready-check-ca`: ok with the
/// certificate that service has, down with the verifier's reason with another one.
#[test]
fn an_https_ready_check_is_verified_against_the_ca_it_is_given() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(tmp.path(), "service-");
    let (other, _) = self_signed(tmp.path(), "other-");
    let service = https_agent(&tmp.path().join("service"), &cert, &key);
    let readyz = |ca: &std::path::Path, name: &str| {
        let data = tmp.path().join(name);
        let mut cmd = Command::new(agent_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .arg("--ready-check")
            .arg(format!("service=https://{}/v2/", service.host()))
            .arg("--ready-check-ca")
            .arg(ca);
        let agent = Agent::spawn(cmd, &data, None);
        let body = stdout(Command::new(tool("curl")).args(["-sSf", &agent.url("/readyz")]));
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["services"]["service"].clone()
    };
    assert_eq!(
        readyz(&cert, "trusting"),
        serde_json::json!({"state": "ok", "status": 200})
    );
    let down = readyz(&other, "distrusting");
    assert_eq!(down["state"], "down", "{down}");
    let error = down["error"].as_str().unwrap();
    assert!(error.contains("certificate"), "{error}");
}

#[test]
fn metrics_count_requests_bytes_and_open_uploads() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), None);
    let http = support::http();
    let blob = vec![7u8; 123_456];
    let digest = support::sha256_digest(&blob);
    let r = http
        .post(&agent.url(&format!("/v2/m/blobs/uploads/?digest={digest}")))
        .send(&blob[..])
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .post(&agent.url("/v2/m/blobs/uploads/"))
        .send_empty()
        .unwrap();
    assert_eq!(r.status(), 202);
    for _ in 0..2 {
        let mut r = http
            .get(&agent.url(&format!("/v2/m/blobs/{digest}")))
            .call()
            .unwrap();
        assert_eq!(r.body_mut().read_to_vec().unwrap().len(), blob.len());
    }
    agent.metrics_with(&[
        "foothold_http_requests_total{route=\"blob\",method=\"GET\",status=\"200\"} 2",
        "foothold_http_requests_total{route=\"upload\",method=\"POST\",status=\"201\"} 1",
        "foothold_http_requests_total{route=\"upload\",method=\"POST\",status=\"202\"} 1",
        // Blob bodies to a client on the agent's host go through the thread's buffer on plain HTTP/1 (remote
        // ones by sendfile: `zero_copy.rs`), neither mapped nor read by `pread` chunks.
        "foothold_bytes_served_total{path=\"buffered\"} 246912",
        "foothold_bytes_served_total{path=\"sendfile\"} 0",
        "foothold_bytes_served_total{path=\"mapped\"} 0",
        "foothold_bytes_served_total{path=\"copied\"} 0",
        "foothold_upload_sessions_open 1",
    ]);
}

#[test]
fn fsck_names_corrupt_and_missing_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 22, &[40_000, 40_000], "example.com/fsck:v1");
    run(Command::new(agent_bin())
        .arg("import")
        .arg(&src)
        .arg("--data")
        .arg(&data));
    support::assert_fsck_clean(&data);

    let blobs = data.join("blobs/sha256");
    let corrupt = blobs.join(&image.layer_digests[0][7..]);
    let mut bytes = std::fs::read(&corrupt).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&corrupt, bytes).unwrap();
    std::fs::remove_file(blobs.join(&image.layer_digests[1][7..])).unwrap();
    let out = Command::new(agent_bin())
        .args(["fsck", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("blob {} is corrupt", image.layer_digests[0])),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "{} is recorded but its file is missing",
            image.layer_digests[1]
        )),
        "{report}"
    );
    assert!(report.contains("2 problems"), "{report}");
}

/// `--data` defaults to ./foothold-data, or /var/lib/foothold when systemd runs the agent (INVOCATION_ID).
#[test]
fn the_data_directory_default_follows_how_the_agent_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let fsck = |systemd: bool| {
        let mut c = Command::new(agent_bin());
        c.arg("fsck")
            .current_dir(tmp.path())
            .env_remove("FOOTHOLD_DATA")
            .env_remove("INVOCATION_ID");
        if systemd {
            c.env("INVOCATION_ID", "0123456789abcdef");
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(
        fsck(false).contains("foothold-data has no foothold.db"),
        "{}",
        fsck(false)
    );
    assert!(
        fsck(true).contains("/var/lib/foothold has no foothold.db"),
        "{}",
        fsck(true)
    );
}
