//! The served process around the registry: HTTPS with a site certificate, /metrics, and fsck catching
//! corruption on disk.

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::support::{agent_bin, layout, run, stdout, tool, wait_for, Agent};

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

/// An agent serving HTTPS with `cert` and `key`, its data in `data`, with `extra` arguments.
fn https_agent(
    data: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
    extra: &[&str],
) -> Agent {
    let mut cmd = Command::new(agent_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .args(extra);
    Agent::spawn(cmd, data, None)
}

/// `GET path` from `agent` with curl (OpenSSL), trusting `ca` only: the body of a 2xx answer.
fn https_get(agent: &Agent, ca: &std::path::Path, path: &str) -> String {
    stdout(
        Command::new(tool("curl"))
            .args(["-sSf", "--cacert"])
            .arg(ca)
            .arg(format!("https://{}{path}", agent.host())),
    )
}

#[test]
fn serves_https_with_the_given_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(tmp.path(), "");
    let agent = https_agent(&tmp.path().join("data"), &cert, &key, &[]);
    // Verified against the certificate: TLS is really on, with the key we gave it.
    let body = https_get(&agent, &cert, "/v2/");
    assert_eq!(body, "{}");
    // The apt source it hands nodes names it by https, the scheme they reached it by.
    let sources = https_get(&agent, &cert, "/apt/foothold.sources");
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
    let metrics = https_get(&agent, &cert, "/metrics");
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
    let service = https_agent(&tmp.path().join("service"), &cert, &key, &[]);
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

/// `foothold-agent pki` on `dir`, its output.
fn pki(dir: &std::path::Path, lifetime: &str) -> String {
    stdout(
        Command::new(agent_bin())
            .args([
                "pki",
                "--name",
                "127.0.0.1",
                "--name",
                "localhost",
                "--lifetime",
                lifetime,
                "--dir",
            ])
            .arg(dir),
    )
}

/// `GET path` over TLS by a rustls client that trusts only `ca`: the status line and the leaf it was served.
fn rustls_get(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    path: &str,
) -> Result<(String, Vec<u8>), String> {
    use std::io::{Read as _, Write as _};
    let mut roots = rustls::RootCertStore::empty();
    for der in foothold_agent::pki::pem_certs(&std::fs::read_to_string(ca).unwrap()).unwrap() {
        roots.add(der.into()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    // A server that closes without close_notify is an error to rustls; the response is read by then.
    let _ = tls.read_to_string(&mut response);
    let leaf = tls.conn.peer_certificates().ok_or("no certificate")?[0].to_vec();
    Ok((
        response.lines().next().unwrap_or_default().to_string(),
        leaf,
    ))
}

#[test]
fn the_agent_serves_a_certificate_of_the_site_ca_and_a_renewed_one_without_a_restart() {
    use x509_parser::prelude::{FromDer as _, X509Certificate};
    let tmp = tempfile::tempdir().unwrap();
    let tls = tmp.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    // 30 s, so that two-thirds of it come during the test: renewed after 20 s.
    let made = pki(&tls, "30s");
    assert!(
        made.contains("site CA") && made.contains(": made,"),
        "{made}"
    );
    assert!(made.contains("issued (the site CA is new)"), "{made}");
    assert!(
        pki(&tls, "30s").contains(": kept, expires"),
        "not due at once"
    );

    let data = tmp.path().join("data");
    let ca = tls.join("ca.pem");
    let watched = format!("site-ca={}", ca.display());
    let agent = https_agent(
        &data,
        &tls.join("cert.pem"),
        &tls.join("key.pem"),
        &["--no-controllers", "--certificate", &watched],
    );

    // A rustls client trusting only the site CA: the leaf it is served is not a CA (webpki refused the old
    // self-signed one as CaUsedAsEndEntity); curl (OpenSSL) with the same CA agrees.
    let (status, first) = rustls_get(agent.addr, &ca, "/v2/").unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (_, leaf) = X509Certificate::from_der(&first).unwrap();
    assert!(!leaf.basic_constraints().unwrap().unwrap().value.ca);
    let body = https_get(&agent, &ca, "/v2/");
    assert_eq!(body, "{}");
    // Trusting another CA, it is refused.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    pki(&other, "1d");
    let refused = rustls_get(agent.addr, &other.join("ca.pem"), "/v2/").unwrap_err();
    assert!(refused.contains("UnknownIssuer"), "{refused}");

    let expiry = |metrics: &str, name: &str| {
        support::metric(
            metrics,
            &format!("foothold_certificate_expiry_seconds{{name=\"{name}\"}}"),
        )
    };
    let metrics = https_get(&agent, &ca, "/metrics");
    let first_expiry = expiry(&metrics, "agent");
    let info = foothold_agent::pki::read_cert(&tls.join("cert.pem")).unwrap();
    assert_eq!(
        first_expiry,
        info.not_after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    let ca_expiry = expiry(&metrics, "site-ca");
    assert!(ca_expiry > first_expiry + 9 * 365 * 86_400, "{metrics}");
    // "Is my site up" shows them too.
    let readyz: serde_json::Value =
        serde_json::from_str(&https_get(&agent, &ca, "/readyz")).unwrap();
    assert_eq!(
        readyz["certificates"]["agent"]["expires"],
        httpdate::fmt_http_date(info.not_after),
        "{readyz}"
    );
    assert_eq!(readyz["certificates"]["agent"]["days_left"], 0, "{readyz}");
    let ca_days = readyz["certificates"]["site-ca"]["days_left"]
        .as_i64()
        .unwrap();
    assert!((3649..=3650).contains(&ca_days), "{readyz}");

    // Files that do not load (a key, its certificate not yet written) leave the served pair as it was.
    let key = std::fs::read(tls.join("key.pem")).unwrap();
    std::fs::write(
        tls.join("key.pem"),
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let log = data.with_extension("log");
    wait_for(
        "the agent to refuse the mismatched pair",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("do not load; still serving the one before")
                .then_some(())
        },
    );
    assert_eq!(rustls_get(agent.addr, &ca, "/v2/").unwrap().1, first);
    std::fs::write(tls.join("key.pem"), key).unwrap();

    // Renewal, as the daily timer runs it: kept until two-thirds of its life, then issued again by the same
    // CA, and served by the running agent.
    let due = info.renew_after();
    let chain = std::fs::read(tls.join("cert.pem")).unwrap();
    if let Ok(left) = due.duration_since(SystemTime::now() + Duration::from_secs(1)) {
        let kept = pki(&tls, "30s");
        assert!(
            kept.contains("serving certificate") && kept.contains(": kept, expires"),
            "{kept}"
        );
        assert_eq!(std::fs::read(tls.join("cert.pem")).unwrap(), chain);
        // The wall clock is what renewal waits for.
        std::thread::sleep(left + Duration::from_secs(2));
    }
    let renewed = pki(&tls, "30s");
    assert!(
        renewed.contains("issued (it is past two-thirds of its life)"),
        "{renewed}"
    );
    assert!(
        renewed.contains(": kept, expires"),
        "the CA stays: {renewed}"
    );
    let second = wait_for(
        "the agent to serve the renewed certificate",
        Duration::from_secs(30),
        || {
            let (_, leaf) = rustls_get(agent.addr, &ca, "/v2/").ok()?;
            (leaf != first).then_some(leaf)
        },
    );
    assert_eq!(
        second,
        foothold_agent::pki::pem_certs(&std::fs::read_to_string(tls.join("cert.pem")).unwrap())
            .unwrap()[0]
    );
    let metrics = https_get(&agent, &ca, "/metrics");
    assert!(expiry(&metrics, "agent") > first_expiry, "{metrics}");
    assert_eq!(expiry(&metrics, "site-ca"), ca_expiry);

    // Another service's certificate (Ironic's on the appliance) from the same CA, in files of its own.
    let ca_before = std::fs::read(&ca).unwrap();
    let svc = tmp.path().join("svc");
    let out = stdout(
        Command::new(agent_bin())
            .args(["pki", "--name", "127.0.0.1", "--dir"])
            .arg(&tls)
            .arg("--cert")
            .arg(svc.join("tls/cert.pem"))
            .arg("--key")
            .arg(svc.join("tls/key.pem")),
    );
    assert!(
        out.contains("svc/tls/cert.pem: issued (there is none)"),
        "{out}"
    );
    assert_eq!(std::fs::read(&ca).unwrap(), ca_before, "the same CA");
    let data = svc.join("data");
    let other_agent = https_agent(
        &data,
        &svc.join("tls/cert.pem"),
        &svc.join("tls/key.pem"),
        &[],
    );
    let (status, leaf) = rustls_get(other_agent.addr, &ca, "/v2/").unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_ne!(leaf, second);
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
        &format!(
            "foothold_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
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
    // The same report as JSON for programs, with the same exit status.
    let out = Command::new(agent_bin())
        .args(["fsck", "-o", "json", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{json}");
    assert!(
        problems.iter().any(|p| p
            .as_str()
            .unwrap()
            .contains(&format!("blob {} is corrupt", image.layer_digests[0]))),
        "{json}"
    );
    assert!(json["blobsChecked"].as_u64().unwrap() > 0, "{json}");
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
