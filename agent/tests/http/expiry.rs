//! Expiry of abandoned uploads (`serve --upload-ttl`): a registry session, a REST record's upload and a tus
//! upload are started and left; the sweep frees their bytes, the metrics move, and tus says when in
//! `Upload-Expires`. An upload whose bytes all reached the disk but which never finished (the agent stopped
//! during the final hash) is completed by the sweep at the next start.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, Agent};

const TOKEN: &str = "expiry-token";

fn agent_with_ttl(dir: &std::path::Path, ttl: u64) -> Agent {
    Agent::start_with(
        &dir.join("data"),
        Some(TOKEN),
        "127.0.0.1:0",
        &["--upload-ttl", &ttl.to_string()],
    )
}

/// Creates a tus upload of `length` bytes; its Location and the creation's answer.
fn tus_create(agent: &Agent, length: u64) -> (String, ureq::http::Response<ureq::Body>) {
    let created = support::http()
        .post(&agent.url("/v1/uploads"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Tus-Resumable", "1.0.0")
        .header("Upload-Length", &length.to_string())
        .send_empty()
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    (location, created)
}

/// A tus PATCH of `body` at offset 0.
fn tus_patch(agent: &Agent, location: &str, body: &[u8]) -> ureq::http::Response<ureq::Body> {
    let r = support::http()
        .patch(&agent.url(location))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Tus-Resumable", "1.0.0")
        .header("Content-Type", "application/offset+octet-stream")
        .header("Upload-Offset", "0")
        .send(body)
        .unwrap();
    assert_eq!(r.status(), 204);
    r
}

fn wait_for_metric(agent: &Agent, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = support::http()
            .get(&agent.url("/metrics"))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {line:?} in:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn upload_bytes(data: &std::path::Path) -> u64 {
    std::fs::read_dir(data.join("uploads"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn abandoned_uploads_of_each_kind_are_freed_after_the_ttl() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let agent = agent_with_ttl(tmp.path(), 4);
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");

    // Registry: a session with 1000 bytes.
    let started = http
        .post(&agent.url("/v2/left/behind/blobs/uploads/"))
        .header("Authorization", &auth)
        .send_empty()
        .unwrap();
    assert_eq!(started.status(), 202);
    let registry = started.headers()["location"].to_str().unwrap().to_owned();
    let r = http
        .patch(&agent.url(&registry))
        .header("Authorization", &auth)
        .header("Content-Type", "application/octet-stream")
        .send(&[1u8; 1000][..])
        .unwrap();
    assert_eq!(r.status(), 202);

    // REST: a record with 1000 of its 5000 bytes.
    let base = agent.url("/v1/baremetalcluster/acme/edge-1/os_images");
    let r = http
        .post(&base)
        .header("Authorization", &auth)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": "left", "image_length": 5000}).to_string())
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .patch(&format!("{base}/left"))
        .header("Authorization", &auth)
        .header("Upload-Offset", "0")
        .send(&[2u8; 1000][..])
        .unwrap();
    assert_eq!(r.status(), 204);

    // tus: 1000 of 5000 bytes; it says when it expires.
    let (tus, created) = tus_create(&agent, 5000);
    assert!(created.headers().contains_key("upload-expires"));
    let r = tus_patch(&agent, &tus, &[3u8; 1000]);
    let expires = r.headers()["upload-expires"].to_str().unwrap().to_owned();
    let at = httpdate::parse_http_date(&expires).unwrap();
    let from_now = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        from_now <= Duration::from_secs(5),
        "Upload-Expires {expires}"
    );

    assert_eq!(upload_bytes(&data), 3000);
    wait_for_metric(
        &agent,
        r#"foothold_uploads_expired_total{kind="registry"} 1"#,
    );
    wait_for_metric(&agent, r#"foothold_uploads_expired_total{kind="rest"} 1"#);
    wait_for_metric(&agent, r#"foothold_uploads_expired_total{kind="tus"} 1"#);
    wait_for_metric(&agent, "foothold_upload_bytes_reclaimed_total 3000");
    assert_eq!(upload_bytes(&data), 0, "the bytes are freed");

    let gone = http.get(&agent.url(&registry)).call().unwrap();
    assert_eq!(gone.status(), 404, "the registry session is gone");
    let gone = http
        .head(&agent.url(&tus))
        .header("Authorization", &auth)
        .header("Tus-Resumable", "1.0.0")
        .call()
        .unwrap();
    assert_eq!(gone.status(), 404, "the tus upload is gone");
    let record: serde_json::Value = serde_json::from_str(
        &http
            .get(&format!("{base}/left"))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        record["image_offset"], 0,
        "the record stays, back at 0: {record}"
    );
    // It can be uploaded again from the start.
    let r = http
        .patch(&format!("{base}/left"))
        .header("Authorization", &auth)
        .header("Upload-Offset", "0")
        .send(&[2u8; 5000][..])
        .unwrap();
    assert_eq!(r.status(), 204);
    drop(agent);
    support::assert_fsck_clean(&data);
}

/// All of a tus upload's bytes on disk, but the agent stopped before it finished: the sweep at the next start
/// finishes it (before, it stayed unfinished for ever).
#[test]
fn an_upload_whose_bytes_all_arrived_is_finished_at_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let agent = agent_with_ttl(tmp.path(), 3600);
    let http = support::http();
    let auth = format!("Bearer {TOKEN}");
    let (tus, _) = tus_create(&agent, 3000);
    let id = tus.rsplit('/').next().unwrap().to_owned();
    tus_patch(&agent, &tus, &[5u8; 1000]);
    drop(agent); // SIGKILL
                 // What a kill during the last chunk's final hash leaves: every byte in the session's file, no blob.
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("uploads").join(&id))
        .unwrap()
        .write_all(&[5u8; 2000])
        .unwrap();
    let file = std::fs::File::open(data.join("uploads").join(&id)).unwrap();
    file.set_modified(std::time::SystemTime::now() - Duration::from_secs(60))
        .unwrap();
    drop(file);

    let agent = agent_with_ttl(tmp.path(), 3600);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let bound = http
            .post(&agent.url("/v1/baremetalcluster/acme/edge-1/binary_images"))
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(json!({"image_name": "recovered", "tus_upload": tus}).to_string())
            .unwrap();
        if bound.status() == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never finished: {}",
            bound.status()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let served = http
        .get(&agent.url("/files/acme/edge-1/binary_images/recovered"))
        .call()
        .unwrap()
        .into_body()
        .read_to_vec()
        .unwrap();
    assert_eq!(served, vec![5u8; 3000]);
}
