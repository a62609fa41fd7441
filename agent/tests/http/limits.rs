//! The limits on what clients may cost (issue "Hardening"), each tripped against the release-shaped binary on
//! 127.0.0.1 while a well-behaved client is still served, and each counted in
//! `foothold_limit_reached_total`: the small-body budget, slow headers, the connection cap, silent bodies,
//! chunks past `--max-uploads`, oversized manifests and JSON nested too deep.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::hostile::{json_of, metrics, TOKEN};
use crate::support::{self, Agent};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// 200 anonymous clients each send all but the last byte of a 1 MiB body: the agent holds at most its
/// small-body budget of them (32 MiB), says so in its metrics, and keeps answering a well-behaved client.
#[test]
fn many_unfinished_small_bodies_cost_at_most_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let pid = agent.child.id();
    let before = rss_kib(pid);
    let len = 1024 * 1024 - 1;
    let chunk = vec![b'{'; len - 1];
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        write!(s, "PUT /v2/a/manifests/v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {len}\r\n\r\n").unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        // A refused connection (the agent answered 401 without reading) may stop taking bytes: that is fine.
        let _ = s.write_all(&chunk);
        held.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !metrics(&agent).contains(r#"foothold_limit_reached_total{limit="small_bodies_budget"}"#)
    {
        assert!(Instant::now() < deadline, "the budget was never reached");
        std::thread::sleep(Duration::from_millis(100));
    }
    let grown_mib = rss_kib(pid).saturating_sub(before) / 1024;
    println!("rss grew {grown_mib} MiB");
    assert!(grown_mib < 80, "the agent grew by {grown_mib} MiB");
    let r = support::http().get(&agent.url("/healthz")).call().unwrap();
    assert_eq!(r.status(), 200);
    drop(held);
}

/// An agent with short client limits (`serve --header-timeout 2 --body-idle-timeout 2 …`).
pub(crate) fn strict_agent(dir: &std::path::Path, max_connections: usize) -> Agent {
    Agent::start_with(
        &dir.join("data"),
        Some(TOKEN),
        "127.0.0.1:0",
        &[
            "--header-timeout",
            "2",
            "--body-idle-timeout",
            "2",
            "--max-connections",
            &max_connections.to_string(),
        ],
    )
}

/// Waits until the peer closes `s` (EOF or reset); panics after `within`.
pub(crate) fn closed_within(s: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) if started.elapsed() < within => return started.elapsed(),
            Ok(_) => continue,
            _ => panic!("still open after {within:?}"),
        }
    }
}

/// 200 clients dribbling headers: /healthz and a blob pull keep answering, and every dribbler is cut off by
/// the header timeout.
#[test]
fn slow_header_clients_are_cut_off_while_others_are_served() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = strict_agent(tmp.path(), 4096);
    let blob = b"a blob a slow client must not keep from anyone";
    let digest = support::sha256_digest(blob);
    let r = support::http()
        .post(&agent.url(&format!("/v2/slow/blobs/uploads/?digest={digest}")))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .send(&blob[..])
        .unwrap();
    assert_eq!(r.status(), 201);

    let mut dribblers: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = TcpStream::connect(agent.addr).unwrap();
            s.write_all(b"GET /v2/ HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    // They keep sending a header line a little at a time, well inside any per-read timeout.
    let dribble_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < dribble_until {
        for s in &mut dribblers {
            let _ = s.write_all(b"X");
        }
        let health = support::http().get(&agent.url("/healthz")).call().unwrap();
        assert_eq!(health.status(), 200);
        let pulled = support::http()
            .get(&agent.url(&format!("/v2/slow/blobs/{digest}")))
            .call()
            .unwrap();
        assert_eq!(pulled.into_body().read_to_vec().unwrap(), blob);
        std::thread::sleep(Duration::from_millis(200));
    }
    for s in &mut dribblers {
        closed_within(s, Duration::from_secs(10));
    }
}

/// Past --max-connections a new connection is closed at once and counted; once the holders are gone (the
/// header timeout), clients are served again.
#[test]
fn connections_past_the_cap_are_closed_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = strict_agent(tmp.path(), 20);
    let held: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(agent.addr).unwrap())
        .collect();
    // The agent accepts in the background: wait until it has taken all twenty.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut extra = loop {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break s,
            Ok(_) => assert!(Instant::now() < deadline, "the cap was never reached"),
        }
    };
    closed_within(&mut extra, Duration::from_secs(1));
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = support::http().get(&agent.url("/metrics")).call() {
            let text = r.into_body().read_to_string().unwrap();
            assert!(
                text.contains(r#"foothold_limit_reached_total{limit="connections"}"#),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A REST PATCH whose client goes silent mid-body is cut off by the body timeout: what arrived is kept, and the
/// record's lock is free for the client's resume and for a DELETE.
#[test]
fn a_silent_upload_body_releases_its_record() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = strict_agent(tmp.path(), 4096);
    let http = support::http();
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/os_images");
    let auth = format!("Bearer {TOKEN}");
    let r = http
        .post(&base)
        .header("Authorization", &auth)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": "stalled", "image_length": 4000}).to_string())
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut s = TcpStream::connect(agent.addr).unwrap();
    write!(s, "PATCH /v1/baremetalcluster/acme/edge-1/os_images/stalled HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nUpload-Offset: 0\r\nContent-Length: 4000\r\n\r\n").unwrap();
    s.write_all(&[7u8; 1000]).unwrap();
    // Silent from here on; the connection stays open.
    closed_within(&mut s, Duration::from_secs(10));
    let (_, record) = json_of(http.get(&format!("{base}/stalled")).call().unwrap());
    assert_eq!(record["image_offset"], 1000, "{record}");
    let resumed = http
        .patch(&format!("{base}/stalled"))
        .header("Authorization", &auth)
        .header("Upload-Offset", "1000")
        .send(&[7u8; 3000][..])
        .unwrap();
    assert_eq!(resumed.status(), 204);
    let (_, record) = json_of(http.get(&format!("{base}/stalled")).call().unwrap());
    assert_eq!(record["upload_complete"], true, "{record}");
    let metrics = metrics(&agent);
    assert!(
        metrics.contains(r#"foothold_limit_reached_total{limit="body_idle_timeout"} 1"#),
        "{metrics}"
    );
    drop(s);
}

/// `--max-uploads 1`: while one chunk is being written, another upload's chunk is answered 429 (REST and
/// registry), counted; once the first is done the others are served.
#[test]
fn chunks_past_max_uploads_are_refused_with_429() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_with(
        &tmp.path().join("data"),
        Some(TOKEN),
        "127.0.0.1:0",
        &["--max-uploads", "1"],
    );
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/os_images");
    for name in ["first", "second"] {
        let r = http
            .post(&base)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(json!({"image_name": name, "image_length": 4 << 20}).to_string())
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    // The first chunk: 4 MiB announced (past the small-body read), 1 MiB sent, then held.
    let mut first = TcpStream::connect(agent.addr).unwrap();
    write!(first, "PATCH /v1/baremetalcluster/acme/edge-1/os_images/first HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nUpload-Offset: 0\r\nContent-Length: {}\r\n\r\n", 4 << 20).unwrap();
    first.write_all(&vec![1u8; 1 << 20]).unwrap();
    // Its bytes reaching the file show its chunk is being written (and holds the one place).
    let deadline = Instant::now() + Duration::from_secs(10);
    while json_of(http.get(&format!("{base}/first")).call().unwrap()).1["image_offset"] == 0 {
        assert!(Instant::now() < deadline, "the first chunk never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = loop {
        let (status, body) = json_of(
            http.patch(&format!("{base}/second"))
                .header("Authorization", &auth)
                .header("Upload-Offset", "0")
                .send(&[2u8; 1000][..])
                .unwrap(),
        );
        if status == 429 {
            break body;
        }
        assert!(Instant::now() < deadline, "never refused: {status} {body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused["error"]["code"], "TOO_MANY_UPLOADS", "{refused}");
    let session = http
        .post(&agent.url("/v2/busy/blobs/uploads/"))
        .header("Authorization", &auth)
        .send_empty()
        .unwrap();
    let location = session.headers()["location"].to_str().unwrap().to_owned();
    let (status, body) = json_of(
        http.patch(&agent.url(&location))
            .header("Authorization", &auth)
            .send(&[3u8; 100][..])
            .unwrap(),
    );
    assert_eq!(
        (status, &body["errors"][0]["code"]),
        (429, &json!("TOOMANYREQUESTS")),
        "{body}"
    );
    // A monolithic push (POST with ?digest=) is one chunk too.
    let blob = [4u8; 100];
    let digest = support::sha256_digest(&blob);
    let (status, body) = json_of(
        http.post(&agent.url(&format!("/v2/busy/blobs/uploads/?digest={digest}")))
            .header("Authorization", &auth)
            .send(&blob[..])
            .unwrap(),
    );
    assert_eq!(
        (status, &body["errors"][0]["code"]),
        (429, &json!("TOOMANYREQUESTS")),
        "{body}"
    );
    assert!(metrics(&agent).contains(r#"foothold_limit_reached_total{limit="uploads"} 3"#));
    // The first chunk finishes; the second upload and the monolithic push go through.
    first.write_all(&vec![1u8; 3 << 20]).unwrap();
    let mut answer = [0u8; 12];
    first.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 204");
    let r = http
        .patch(&format!("{base}/second"))
        .header("Authorization", &auth)
        .header("Upload-Offset", "0")
        .send(&[2u8; 1000][..])
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = http
        .post(&agent.url(&format!("/v2/busy/blobs/uploads/?digest={digest}")))
        .header("Authorization", &auth)
        .send(&blob[..])
        .unwrap();
    assert_eq!(r.status(), 201);
}

/// A manifest over 4 MiB is answered 413 and one nested past 32 levels 400, both MANIFEST_INVALID; REST
/// metadata nested too deep is a 400 naming the cap. Each is counted by limit, and a well-formed manifest
/// and record still go through.
#[test]
fn oversized_and_deeply_nested_documents_are_refused_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let config = br#"{}"#;
    let config_digest = support::sha256_digest(config);
    let r = http
        .post(&agent.url(&format!("/v2/deep/blobs/uploads/?digest={config_digest}")))
        .header("Authorization", &auth)
        .send(&config[..])
        .unwrap();
    assert_eq!(r.status(), 201);
    let manifest = |annotation: Value| {
        json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": 2},
            "layers": [],
            "annotations": {"x": "y"},
            "extra": annotation,
        })
        .to_string()
    };
    let put = |body: String| {
        json_of(
            http.put(&agent.url("/v2/deep/manifests/latest"))
                .header("Authorization", &auth)
                .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                .send(body)
                .unwrap(),
        )
    };
    let nested = |levels: usize| -> Value {
        serde_json::from_str(&format!("{}{}", "[".repeat(levels), "]".repeat(levels))).unwrap()
    };
    // 31 levels under the manifest's own object is 32 in all: the most allowed.
    let (status, body) = put(manifest(nested(31)));
    assert_eq!(status, 201, "{body}");
    let (status, body) = put(manifest(nested(32)));
    assert_eq!(
        (status, &body["errors"][0]["code"]),
        (400, &json!("MANIFEST_INVALID")),
        "{body}"
    );
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("32 levels"),
        "{body}"
    );
    let (status, body) = put(manifest(json!("x".repeat(4 << 20))));
    assert_eq!(
        (status, &body["errors"][0]["code"]),
        (413, &json!("MANIFEST_INVALID")),
        "{body}"
    );
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/os_images");
    let (status, body) = json_of(
        http.post(&base)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(json!({"image_name": "deep", "image_length": 1, "extra": nested(40)}).to_string())
            .unwrap(),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("INVALID_REQUEST")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("32 levels"),
        "{body}"
    );
    let text = metrics(&agent);
    for line in [
        r#"foothold_limit_reached_total{limit="json_depth"} 2"#,
        r#"foothold_limit_reached_total{limit="manifest_size"} 1"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    let (status, body) = json_of(
        http.post(&base)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(json!({"image_name": "shallow", "image_length": 1}).to_string())
            .unwrap(),
    );
    assert_eq!(status, 201, "{body}");
}
