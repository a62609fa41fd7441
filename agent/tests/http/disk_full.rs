//! A disk that fills during an upload: the client gets 507 with a JSON body, the store stays consistent, and
//! what fit is kept (the client may resume once space is freed). The data directory lives on a small tmpfs
//! mounted by the test (CI runs as root).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{assert_fsck_clean, run, tool, Agent};

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        run(Command::new(tool("mount"))
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at));
        Tmpfs(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_answers_507_and_leaves_the_store_consistent() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&tmp.path().join("disk"), "8m");
    let data = disk.0.join("data");
    let agent = Agent::start(&data, Some("tok"));
    let http = support::http();
    let base = agent.url("/v1/baremetalcluster/acme/edge1/os_images");
    let r = http
        .post(&base)
        .header("authorization", "Bearer tok")
        .header("content-type", "application/json")
        .send(r#"{"image_name": "big.img", "image_length": 16777216}"#)
        .unwrap();
    assert_eq!(r.status(), 201);
    // curl, because the agent answers 507 and closes while the client is still sending (a large body is not
    // drained); curl still reads that early response.
    let file = tmp.path().join("big.img");
    std::fs::write(&file, vec![0x5au8; 16 << 20]).unwrap();
    let out = Command::new(tool("curl"))
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-X",
            "PATCH",
            "-H",
            "Authorization: Bearer tok",
            "-H",
            "Upload-Offset: 0",
        ])
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("{base}/big.img"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    assert_eq!(code, "507", "{text}");
    let err: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(err["error"]["code"], "STORAGE_FULL");

    // The record is intact and reports what fit; nothing is served as complete.
    let mut r = http.get(&format!("{base}/big.img")).call().unwrap();
    let rec: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(rec["upload_complete"], false);
    assert!(rec["image_offset"].as_u64().unwrap() < 16 << 20);
    let r = http
        .get(&agent.url("/files/acme/edge1/os_images/big.img"))
        .call()
        .unwrap();
    assert_eq!(r.status(), 404);
    drop(agent);
    assert_fsck_clean(&data);
}
