//! The fetch phase against a real HTTP server on 127.0.0.1 (a small one here, so a test can cut a download off
//! and see the Range request that resumes it): verified content lands in the cache, an interrupted download
//! resumes where it stopped, a cache hit makes no request, and a wrong pin caches nothing.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use foothold_image_builder::fetch::{cached, fetch_all, fetch_one, Fetched};
use foothold_image_builder::progress::Progress;
use sha2::{Digest, Sha256};

/// Serves `body` at any path; the first `cut_first` responses stop after half the body. Records each request's
/// Range start (or "-").
struct Server {
    port: u16,
    ranges: Arc<Mutex<Vec<String>>>,
}

fn serve(body: Vec<u8>, cut_first: usize) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { continue };
            handle(conn, &body, n < cut_first, &seen);
        }
    });
    Server { port, ranges }
}

fn handle(mut conn: TcpStream, body: &[u8], cut: bool, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
            range = v.trim().trim_end_matches('-').parse::<usize>().ok();
        }
    }
    seen.lock()
        .unwrap()
        .push(range.map_or("-".into(), |r| r.to_string()));
    let (status, part) = match range {
        Some(start) => ("206 Partial Content", &body[start..]),
        None => ("200 OK", body),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        part.len()
    );
    let send = if cut { &part[..part.len() / 2] } else { part };
    let _ = conn.write_all(send);
    let _ = conn.flush();
    // Closing the connection short of Content-Length is the interruption.
}

fn content() -> (Vec<u8>, String) {
    let body: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let hex = hex::encode(Sha256::digest(&body));
    (body, hex)
}

#[test]
fn an_interrupted_download_resumes_and_a_cache_hit_makes_no_request() {
    let cache = tempfile::tempdir().unwrap();
    let (body, hex) = content();
    let server = serve(body.clone(), 1);
    let url = format!("http://127.0.0.1:{}/k3s", server.port);

    let err = format!("{:#}", fetch_one(cache.path(), &url, &hex).unwrap_err());
    assert!(
        err.contains("interrupted after") && err.contains("resume"),
        "{err}"
    );
    assert!(
        !cached(cache.path(), &hex).exists(),
        "a partial download is not in the cache"
    );

    let got = fetch_one(cache.path(), &url, &hex).unwrap();
    let half = body.len() as u64 / 2;
    assert_eq!(
        got,
        Fetched::Downloaded {
            bytes: body.len() as u64,
            resumed_from: half
        }
    );
    assert_eq!(
        *server.ranges.lock().unwrap(),
        ["-".to_owned(), half.to_string()]
    );
    assert_eq!(std::fs::read(cached(cache.path(), &hex)).unwrap(), body);

    // Cached: no request, even with nothing listening there.
    assert_eq!(
        fetch_one(cache.path(), "http://127.0.0.1:9/gone", &hex).unwrap(),
        Fetched::Cached
    );
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}

#[test]
fn content_that_does_not_match_its_pin_is_not_cached() {
    let cache = tempfile::tempdir().unwrap();
    let (body, _) = content();
    let server = serve(body, 0);
    let wrong = "0".repeat(64);
    let url = format!("http://127.0.0.1:{}/x", server.port);
    let err = format!("{:#}", fetch_one(cache.path(), &url, &wrong).unwrap_err());
    assert!(
        err.contains("the spec pins 0000") && err.contains("nothing was cached"),
        "{err}"
    );
    assert!(!cached(cache.path(), &wrong).exists());
    let left = std::fs::read_dir(cache.path().join("files/sha256"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "no partial file left");
}

#[test]
fn fetch_all_names_the_spec_field_of_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (body, hex) = content();
    let server = serve(body, 0);
    let spec = dir.path().join("site.yaml");
    std::fs::write(
        &spec,
        format!(
            "apiVersion: foothold.io/v1alpha1\nkind: Image\nname: site\nbase: {{suite: bookworm}}\nhostname: site\noutputs: {{formats: [raw], diskSize: 4GiB}}\ncomponents:\n  files:\n    - url: http://127.0.0.1:{p}/ok\n      sha256: {hex}\n      dest: /usr/local/bin/ok\n    - url: http://127.0.0.1:{p}/bad\n      sha256: {bad}\n      serve: {{kind: os_images, name: bad.img}}\n",
            p = server.port,
            bad = "1".repeat(64)
        ),
    )
    .unwrap();
    let loaded = foothold_image_builder::spec::load(&spec).unwrap();
    let cache = dir.path().join("cache");
    let err = fetch_all(&loaded, &cache, 2, &Progress::new(true)).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("site.yaml: components.files[1].url"),
        "{text}"
    );
    assert!(cached(&cache, &hex).is_file(), "the good one is cached");
}

/// A spec with one url input, `http://127.0.0.1:<port>/a` pinned to `hex`.
fn one_file_spec(dir: &std::path::Path, port: u16, hex: &str) -> std::path::PathBuf {
    let spec = dir.join("site.yaml");
    std::fs::write(
        &spec,
        format!(
            "apiVersion: foothold.io/v1alpha1\nkind: Image\nname: site\nbase: {{suite: bookworm}}\nhostname: site\noutputs: {{formats: [raw], diskSize: 4GiB}}\ncomponents:\n  files:\n    - url: http://127.0.0.1:{port}/a\n      sha256: {hex}\n      dest: /usr/local/bin/a\n",
        ),
    )
    .unwrap();
    spec
}

/// `fetch --json` whose reader has gone (a closed pipe): the download completes and the loss is said once.
#[test]
fn json_events_to_a_closed_pipe_do_not_stop_a_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let (body, hex) = content();
    let server = serve(body, 0);
    let spec = one_file_spec(dir.path(), server.port, &hex);
    let cache = dir.path().join("cache");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foothold-build"))
        .arg("fetch")
        .arg("--json")
        .arg("--cache")
        .arg(&cache)
        .arg(&spec)
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr.matches("can no longer be written").count(),
        1,
        "{stderr}"
    );
    assert!(cached(&cache, &hex).is_file());
}

/// A `foothold-build` run started while this process holds its cache: it must say it waits for the cache,
/// naming this process, and still be running.
struct Waiting {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Waiting {
    fn start(cmd: &mut std::process::Command) -> Waiting {
        let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let _ = lines_tx.send(line.unwrap());
            }
        });
        let waiting = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("it says it waits");
        assert!(
            waiting.contains("waiting for the cache")
                && waiting.contains(&format!("process {}", std::process::id())),
            "{waiting}"
        );
        assert!(child.try_wait().unwrap().is_none(), "it waits");
        Waiting { child, lines }
    }

    /// Its exit status and the rest of its standard error, once the lock is free.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let (status_tx, status) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = status_tx.send(self.child.wait().unwrap());
        });
        let status = status
            .recv_timeout(Duration::from_secs(60))
            .expect("it ends once the lock is free");
        // The reader's channel closes at EOF.
        let mut rest = String::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => rest += &(line + "\n"),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("standard error did not end: {e}"),
            }
        }
        (status, rest)
    }
}

/// A fetch on a cache another process holds waits, says whose it is, and goes on once the holder lets go.
#[test]
fn a_second_fetch_on_one_cache_waits_for_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (body, hex) = content();
    let server = serve(body, 0);
    let spec = one_file_spec(dir.path(), server.port, &hex);
    let cache = dir.path().join("cache");
    let held = foothold_image_builder::cache_lock::lock(&cache).unwrap();
    let waiting = Waiting::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_foothold-build"))
            .arg("fetch")
            .arg("--cache")
            .arg(&cache)
            .arg(&spec),
    );
    assert!(
        !cached(&cache, &hex).exists(),
        "nothing fetched while waiting"
    );
    assert!(server.ranges.lock().unwrap().is_empty());

    drop(held);
    let (status, rest) = waiting.finish();
    assert!(status.success(), "{status}: {rest}");
    assert!(cached(&cache, &hex).is_file());
}

/// `build --bundle` unpacks into `<out>/.bundle`, the build's cache: while another process holds that cache, the
/// build waits before touching it; then it clears what an earlier build left there and reads the bundle.
#[test]
fn a_bundle_build_waits_for_its_cache_before_unpacking() {
    let dir = tempfile::tempdir().unwrap();
    // A tar with no bundle index in it.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("readme"), "not a bundle\n").unwrap();
    let tar = dir.path().join("not-a-bundle.tar");
    let made = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&empty)
        .arg("readme")
        .status()
        .unwrap();
    assert!(made.success());
    let out = dir.path().join("out");
    let cache = out.join(".bundle");
    std::fs::create_dir_all(cache.join("rootfs/earlier")).unwrap();
    std::fs::write(cache.join("rootfs/earlier/.complete"), "").unwrap();
    let held = foothold_image_builder::cache_lock::lock(&cache).unwrap();
    let waiting = Waiting::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_foothold-build"))
            .arg("build")
            .arg("--offline")
            .arg("--bundle")
            .arg(&tar)
            .arg("--out")
            .arg(&out),
    );
    assert!(
        cache.join("rootfs/earlier/.complete").exists() && !cache.join("readme").exists(),
        "the cache was changed while another process held it"
    );

    drop(held);
    let (status, rest) = waiting.finish();
    assert!(!status.success());
    assert!(
        rest.contains("not-a-bundle.tar: no foothold-bundle.json; not a foothold-build bundle"),
        "{rest}"
    );
    assert!(
        !cache.join("rootfs").exists() && cache.join("readme").is_file(),
        "the earlier build's files were cleared and the tar unpacked"
    );
    assert!(foothold_image_builder::cache_lock::path(&cache).is_file());
}
