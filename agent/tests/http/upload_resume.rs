//! End to end with curl and the real binary: a 256 MiB image uploaded in chunks through the BPA REST API while
//! the agent is SIGKILLed mid-chunk several times; after each restart the client resumes from `image_offset`.
//! The download equals the source, and `sha256sum -c` accepts the `.sha256sum` file the agent serves.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{assert_fsck_clean, run, tool, wait_for, Agent};
use rand::{RngCore, SeedableRng};

const TOKEN: &str = "upload-token";
const SIZE: usize = 256 << 20;
const CHUNK: usize = 32 << 20;

fn offset(agent: &Agent, item: &str) -> u64 {
    let out = run(Command::new(tool("curl")).args(["-sf", &agent.url(item)]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["image_offset"].as_u64().unwrap()
}

/// PATCHes `bytes` at `at` with curl reading the body from stdin (chunked: curl does not know its length).
fn patch(agent: &Agent, item: &str, at: u64, bytes: &[u8]) -> std::process::Child {
    let mut child = Command::new(tool("curl"))
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "PATCH",
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
        ])
        .args([
            "-H",
            &format!("Upload-Offset: {at}"),
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            "@-",
        ])
        .arg(agent.url(item))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let owned = bytes.to_vec();
    std::thread::spawn(move || {
        let _ = stdin.write_all(&owned); // fails when the agent is killed under it: that is the point
    });
    child
}

#[test]
fn curl_resumes_an_upload_across_sigkills_and_the_download_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut source = vec![0u8; SIZE];
    rand_chacha::ChaCha8Rng::seed_from_u64(7).fill_bytes(&mut source);
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&source));
    let item = "/v1/baremetalcluster/acme/edge1/os_images/node.img";

    let mut agent = Agent::start(&data_dir, Some(TOKEN));
    let meta = serde_json::json!({"image_name": "node.img", "image_length": SIZE, "sha256": sha})
        .to_string();
    run(Command::new(tool("curl"))
        .args([
            "-sf",
            "-X",
            "POST",
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
            "-H",
            "Content-Type: application/json",
            "--data",
            &meta,
        ])
        .arg(agent.url("/v1/baremetalcluster/acme/edge1/os_images")));

    let mut kills = 0;
    let mut chunks = 0;
    loop {
        let at = offset(&agent, item);
        if at == SIZE as u64 {
            break;
        }
        let end = (at as usize + CHUNK).min(SIZE);
        let mut curl = patch(&agent, item, at, &source[at as usize..end]);
        chunks += 1;
        if chunks % 3 == 2 && kills < 3 {
            // Kill once the chunk is under way: the agent's offset has moved past `at`.
            wait_for(
                "the chunk to start arriving",
                Duration::from_secs(60),
                || {
                    let now = Command::new(tool("curl"))
                        .args(["-sf", &agent.url(item)])
                        .output()
                        .ok()?;
                    let v: serde_json::Value = serde_json::from_slice(&now.stdout).ok()?;
                    (v["image_offset"].as_u64()? > at).then_some(())
                },
            );
            agent.kill();
            kills += 1;
            let _ = curl.wait();
            agent = Agent::start(&data_dir, Some(TOKEN));
            continue;
        }
        let out = curl.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "204", "PATCH at {at}");
    }
    assert_eq!(kills, 3, "the upload finished before every kill could land");

    let download = tmp.path().join("node.img");
    run(Command::new(tool("curl"))
        .args(["-sf", "-o"])
        .arg(&download)
        .arg(agent.url("/files/acme/edge1/os_images/node.img")));
    assert!(
        std::fs::read(&download).unwrap() == source,
        "downloaded content differs"
    );
    let sum = run(Command::new(tool("curl")).args([
        "-sf",
        &agent.url("/files/acme/edge1/os_images/node.img.sha256sum"),
    ]))
    .stdout;
    std::fs::write(tmp.path().join("node.img.sha256sum"), &sum).unwrap();
    run(Command::new(tool("sha256sum"))
        .args(["-c", "node.img.sha256sum"])
        .current_dir(tmp.path()));
    drop(agent);
    assert_fsck_clean(&data_dir);
}
