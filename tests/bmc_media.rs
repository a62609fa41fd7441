//! The tests' Redfish BMC (sushy-tools with `sushy_media_cache.py`): an InsertMedia whose client gave up still
//! completes its fetch, a retry of the same image takes it without fetching again (waiting for a fetch in
//! progress instead of starting another), and an image whose content changed is fetched again. The image is
//! served slowly by a server here that counts its GETs, as the appliance under TCG serves the node's ISO.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use foothold_e2e::free_port;
use foothold_e2e::sushy::{Sushy, System};

const SIZE: usize = 4 << 20;
/// The server sends the image in 256 KiB pieces, one every 100 ms: 1.6 s for the whole.
const PIECE: usize = 256 << 10;

/// Serves one image at any path, HEAD and GET, slowly; `version` is its ETag (and its content's seed).
fn serve(version: Arc<AtomicU64>, gets: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let (version, gets) = (version.clone(), gets.clone());
            std::thread::spawn(move || {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap() == 0 || header == "\r\n" {
                        break;
                    }
                }
                let v = version.load(Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\nETag: \"v{v}\"\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(head.as_bytes());
                if line.starts_with("GET ") {
                    gets.fetch_add(1, Ordering::SeqCst);
                    let piece = vec![v as u8; PIECE];
                    for _ in 0..SIZE / PIECE {
                        if stream.write_all(&piece).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                let _ = reader.read(&mut [0; 1]);
            });
        }
    });
    port
}

#[test]
fn a_retried_insert_media_takes_the_image_the_first_fetched_and_a_changed_image_is_fetched_again() {
    let deadline = foothold_e2e::Deadline::start("bmc_media", Duration::from_secs(300));
    let tmp = tempfile::tempdir().unwrap();
    let system = System {
        name: "bmc-media".into(),
        uuid: "27946b59-9e44-4fa7-8e91-f3527a1e0001".into(),
        mac: "02:00:00:00:00:01".into(),
    };
    let bmc = Sushy::fake(tmp.path(), free_port(), &[system], "admin", "pw");
    let log = bmc.log.clone();
    deadline.diagnose("sushy-tools' log (its last 40 lines)", move || {
        foothold_e2e::deadline::tail_file(&log, 40)
    });
    let (version, gets) = (Arc::new(AtomicU64::new(1)), Arc::new(AtomicUsize::new(0)));
    let image = format!(
        "http://127.0.0.1:{}/node.iso",
        serve(version.clone(), gets.clone())
    );
    let insert = |max_time: &str| {
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-u", "admin:pw"])
            .args(["--max-time", max_time, "-H", "Content-Type: application/json"])
            .args(["-d", &format!("{{\"Image\": \"{image}\"}}")])
            .arg(format!(
                "http://127.0.0.1:{}/redfish/v1/Systems/{}/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
                bmc.port, "27946b59-9e44-4fa7-8e91-f3527a1e0001"
            ))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // The client gives up before the image is fetched (as Ironic does after 60 s); the BMC goes on fetching.
    assert_eq!(insert("0.5"), "000");
    // The retry comes while that fetch is under way (its GET has begun; the whole takes 1.6 s), waits for it,
    // and another takes the kept image: one GET for three inserts. (Without this wait, a BMC slow to begin
    // the first fetch would make the retry's the only GET, and the count would prove nothing of waiting.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while gets.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the BMC did not begin fetching the image within 30 s of the first insert"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(insert("30"), "204");
    assert_eq!(insert("30"), "204");
    assert_eq!(gets.load(Ordering::SeqCst), 1);
    let medium = bmc.call(
        ("admin", "pw"),
        "GET",
        "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1e0001/VirtualMedia/Cd",
        None,
    );
    assert!(medium.contains(&image), "{medium}");

    // The image changes (its ETag): the next insert fetches it again.
    version.store(2, Ordering::SeqCst);
    assert_eq!(insert("30"), "204");
    assert_eq!(gets.load(Ordering::SeqCst), 2);
}
