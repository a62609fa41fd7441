//! What a hostile or careless client found (issue "Hardening"), each against the release-shaped binary on
//! 127.0.0.1: made-up methods, unknown paths, bad paging, names that break URLs, stale `If-Range`, records
//! that could never complete or be downloaded, what anonymous `/readyz` tells, clients that hang up mid-upload
//! (the limits on what clients may cost are in `limits.rs`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::limits::{closed_within, strict_agent};
use crate::support::{self, Agent};

pub(crate) const TOKEN: &str = "hostile-token";

pub(crate) fn json_of(r: ureq::http::Response<ureq::Body>) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.into_body().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({ "not json": text })),
    )
}

/// One raw request on a fresh connection; returns the status line's code and the whole answer.
pub(crate) fn raw(agent: &Agent, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

pub(crate) fn metrics(agent: &Agent) -> String {
    support::http()
        .get(&agent.url("/metrics"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap()
}

#[test]
fn made_up_methods_add_no_metric_series_and_unknown_paths_are_json_404s() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let long = "X".repeat(4000);
    for i in 0..300 {
        let (code, _) = raw(
            &agent,
            &format!("M{i}{long} /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        );
        assert_ne!(code, 0, "no answer to a made-up method");
    }
    let text = metrics(&agent);
    assert!(!text.contains("M1XX"), "a made-up method became a label");
    assert!(text.contains(r#"method="other""#), "{text}");
    assert!(
        text.len() < 16 * 1024,
        "/metrics grew to {} bytes",
        text.len()
    );
    let log = std::fs::read_to_string(tmp.path().join("data.log")).unwrap();
    assert!(
        !log.contains(&long),
        "a made-up method went into the log whole"
    );

    let http = support::http();
    for path in ["/nope", "/v1/uploads/a/b", "/v1/nothing-here", "/files/a"] {
        let (status, body) = json_of(http.get(&agent.url(path)).call().unwrap());
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "NOT_FOUND", "{path}: {body}");
    }
    // An extractor's refusal (a path segment that is not UTF-8) is JSON too.
    for path in [
        "/v1/baremetalcluster/a/b/os_images/%FF",
        "/files/a/b/os_images/%FF",
    ] {
        let (status, body) = json_of(http.get(&agent.url(path)).call().unwrap());
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_REQUEST", "{path}: {body}");
    }
    let (status, body) = json_of(http.delete(&agent.url("/healthz")).call().unwrap());
    assert_eq!(status, 405, "{body}");
    assert_eq!(body["error"]["code"], "METHOD_NOT_ALLOWED", "{body}");
    // tus still insists on its version on its own paths.
    let (status, body) = json_of(
        http.head(&agent.url("/v1/uploads/00000000-0000-0000-0000-000000000000"))
            .call()
            .unwrap(),
    );
    assert_eq!(status, 412, "{body}");

    let (status, body) = json_of(http.get(&agent.url("/v2/a/tags/list?n=-1")).call().unwrap());
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["errors"][0]["code"], "PAGINATION_NUMBER_INVALID",
        "{body}"
    );
}

#[test]
fn records_that_could_never_complete_or_download_are_refused_and_locations_are_encoded() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let http = support::http();
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/binary_images");
    let auth = format!("Bearer {TOKEN}");
    let create = |body: Value| {
        json_of(
            http.post(&base)
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .send(body.to_string())
                .unwrap(),
        )
    };
    let (status, body) = create(json!({"image_name": "x.sha256sum", "image_length": 3}));
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("INVALID_NAME")),
        "{body}"
    );

    let (status, body) =
        create(json!({"image_name": "empty", "image_length": 0, "sha256": "0".repeat(64)}));
    assert_eq!(status, 422, "{body}");
    let (status, _) = json_of(http.get(&format!("{base}/empty")).call().unwrap());
    assert_eq!(status, 404, "a refused empty record was kept");

    let created = http
        .post(&base)
        .header("Authorization", &auth)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": "a?b#c d", "image_length": 5}).to_string())
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(
        location,
        "/v1/baremetalcluster/acme/edge-1/binary_images/a%3Fb%23c%20d"
    );
    let r = http
        .patch(&agent.url(&location))
        .header("Authorization", &auth)
        .header("Upload-Offset", "0")
        .send(&b"hello"[..])
        .unwrap();
    assert_eq!(r.status(), 204, "PATCH at the Location");

    // If-Range: the range only while the client's validator is current.
    let file = agent.url("/files/acme/edge-1/binary_images/a%3Fb%23c%20d");
    let first = http.get(&file).call().unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let modified = first.headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_owned();
    for (validator, status, body) in [
        (etag.as_str(), 206, "ell"),
        (modified.as_str(), 206, "ell"),
        ("\"sha256:stale\"", 200, "hello"),
    ] {
        let r = http
            .get(&file)
            .header("Range", "bytes=1-3")
            .header("If-Range", validator)
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "If-Range {validator}");
        assert_eq!(r.into_body().read_to_string().unwrap(), body);
    }
}

#[test]
fn anonymous_readyz_does_not_name_the_kubeconfig() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let secret = tmp.path().join("very-private-dir/kubeconfig");
    let token = data.with_extension("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut cmd = Command::new(support::agent_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .arg("--token-file")
        .arg(&token)
        .arg("--kubeconfig")
        .arg(&secret);
    let agent = Agent::spawn(cmd, &data, Some(TOKEN));
    let http = support::http();
    let deadline = Instant::now() + Duration::from_secs(30);
    let with_token = loop {
        let (_, body) = json_of(
            http.get(&agent.url("/readyz"))
                .header("Authorization", &format!("Bearer {TOKEN}"))
                .call()
                .unwrap(),
        );
        if body["controllers"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("very-private-dir"))
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the controllers never reported: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (_, anonymous) = json_of(http.get(&agent.url("/readyz")).call().unwrap());
    assert_eq!(
        anonymous["controllers"]["state"], "connecting",
        "{anonymous}"
    );
    assert!(
        !anonymous.to_string().contains("very-private-dir"),
        "{anonymous} (with the token: {with_token})"
    );
}

fn rest_record(agent: &Agent, name: &str) -> Value {
    json_of(
        support::http()
            .get(&agent.url(&format!(
                "/v1/baremetalcluster/acme/edge-1/os_images/{name}"
            )))
            .call()
            .unwrap(),
    )
    .1
}

/// A whole 8 MiB PATCH sent, and the connection closed without reading the answer: the bytes are kept, and as
/// they are the whole image the record completes (before, the offset stayed 0, or the record sat full but never
/// completed). A chunked body that fills the image and then runs on completes it too, with 413.
#[test]
fn acknowledged_bytes_survive_a_client_that_hangs_up() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = strict_agent(tmp.path(), 4096);
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let content: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    for name in ["hung-up", "overflowing"] {
        let r = http
            .post(&agent.url("/v1/baremetalcluster/acme/edge-1/os_images"))
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(
                json!({"image_name": name, "image_length": content.len(),
                       "sha256": support::sha256_digest(&content)[7..]})
                .to_string(),
            )
            .unwrap();
        assert_eq!(r.status(), 201);
    }

    let mut s = TcpStream::connect(agent.addr).unwrap();
    write!(s, "PATCH /v1/baremetalcluster/acme/edge-1/os_images/hung-up HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nUpload-Offset: 0\r\nContent-Length: {}\r\n\r\n", content.len()).unwrap();
    s.write_all(&content).unwrap();
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let record = rest_record(&agent, "hung-up");
        if record["upload_complete"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "never completed: {record}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Chunked: the image's worth, then one chunk more.
    let mut s = TcpStream::connect(agent.addr).unwrap();
    write!(s, "PATCH /v1/baremetalcluster/acme/edge-1/os_images/overflowing HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nUpload-Offset: 0\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").unwrap();
    for part in content.chunks(1 << 20).chain([&b"more"[..]]) {
        write!(s, "{:x}\r\n", part.len()).unwrap();
        s.write_all(part).unwrap();
        s.write_all(b"\r\n").unwrap();
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let record = rest_record(&agent, "overflowing");
    assert_eq!(record["upload_complete"], true, "{record}");
    let served = http
        .get(&agent.url("/files/acme/edge-1/os_images/overflowing"))
        .call()
        .unwrap()
        .into_body()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    assert!(served == content, "served content differs");
}

/// A tus chunk with an Upload-Checksum that is cut off midway cannot be verified: none of it is kept.
#[test]
fn an_unverifiable_tus_chunk_is_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = strict_agent(tmp.path(), 4096);
    let auth = format!("Bearer {TOKEN}");
    let created = support::http()
        .post(&agent.url("/v1/uploads"))
        .header("Authorization", &auth)
        .header("Tus-Resumable", "1.0.0")
        .header("Upload-Length", "4000")
        .send_empty()
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let path = location
        .split_once("/v1/")
        .map(|(_, p)| format!("/v1/{p}"))
        .unwrap();
    let mut s = TcpStream::connect(agent.addr).unwrap();
    write!(s, "PATCH {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nUpload-Checksum: sha256 {}\r\nContent-Length: 4000\r\n\r\n", "A".repeat(43) + "=").unwrap();
    s.write_all(&[1u8; 1500]).unwrap();
    closed_within(&mut s, Duration::from_secs(10));
    let head = support::http()
        .head(&agent.url(&path))
        .header("Authorization", &auth)
        .header("Tus-Resumable", "1.0.0")
        .call()
        .unwrap();
    assert_eq!(head.headers()["upload-offset"], "0");
}

/// One process at a time has a data directory: `add-file`, `import` and a second `serve` on a live one are
/// refused (before, `add-file` emptied `tmp/` under a running upload), and the lock file stays empty (the
/// builder's data partitions must not differ by a pid).
#[test]
fn a_live_data_directory_is_not_opened_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let agent = Agent::start(&data, Some(TOKEN));
    let file = tmp.path().join("file.bin");
    std::fs::write(&file, b"content").unwrap();
    let add_file = || {
        Command::new(support::agent_bin())
            .arg("add-file")
            .arg(&file)
            .arg("--data")
            .arg(&data)
            .args([
                "--owner",
                "o",
                "--cluster",
                "c",
                "--kind",
                "binary_images",
                "--name",
                "f",
            ])
            .output()
            .unwrap()
    };
    let layout = tmp.path().join("layout");
    support::layout::write_image(&layout, 3, &[1000], "docker.io/library/x:1");
    let refused = [
        add_file(),
        Command::new(support::agent_bin())
            .arg("import")
            .arg(&layout)
            .arg("--data")
            .arg(&data)
            .output()
            .unwrap(),
        Command::new(support::agent_bin())
            .args([
                "serve",
                "--no-controllers",
                "--listen",
                "127.0.0.1:0",
                "--data",
            ])
            .arg(&data)
            .output()
            .unwrap(),
    ];
    for out in refused {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("is in use by another foothold-agent"), "{err}");
    }
    assert_eq!(std::fs::metadata(data.join("lock")).unwrap().len(), 0);
    drop(agent);
    let out = add_file();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
