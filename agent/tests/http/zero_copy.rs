//! The lent-chunk paths on plain HTTP/1 — `sendfile` (`--sendfile always`, and remote clients by default) and
//! the thread's buffer (clients on the agent's host by default): what each sends is byte for byte the blob, for
//! whole and ranged GETs across its 8 MiB chunks, HEAD sends no body, several requests share one connection, a
//! client that hangs up mid-body costs nothing but its connection; the default picks the path by the client's
//! address; HTTP/2 keeps the mapped path. The metrics say which path served the bytes, so each test knows the
//! path it checked was taken.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::support::{self, agent_bin, stdout, tool, Agent};

/// A blob over two lent chunks (8 MiB each) and an odd tail, of bytes that differ at every offset that matters.
fn blob() -> Vec<u8> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    (0..(17 << 20) + 4321)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as u8
        })
        .collect()
}

fn push(agent: &Agent, repo: &str, blob: &[u8]) -> String {
    let digest = support::sha256_digest(blob);
    let r = support::http()
        .post(&agent.url(&format!("/v2/{repo}/blobs/uploads/?digest={digest}")))
        .send(blob)
        .unwrap();
    assert_eq!(r.status(), 201);
    digest
}

fn served(agent: &Agent, path: &str) -> u64 {
    support::metric(
        &agent.metrics(),
        &format!("foothold_bytes_served_total{{path=\"{path}\"}}"),
    )
}

/// One HTTP/1.1 exchange on `conn`: the status, the headers (names lower-cased) and, unless `head`, the body of
/// Content-Length bytes.
fn exchange(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    extra: &str,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    write!(
        conn.get_mut(),
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"
    )
    .unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; if method == "HEAD" { 0 } else { len }];
    conn.read_exact(&mut body).unwrap();
    (code, headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    &headers.iter().find(|(k, _)| k == name).unwrap().1
}

fn connect(agent: &Agent) -> BufReader<TcpStream> {
    let conn = TcpStream::connect(agent.host()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    BufReader::new(conn)
}

/// Asserts that the agent served `bytes` body bytes the `path` way and none any other of the four ways.
fn served_only(agent: &Agent, path: &str, bytes: u64) {
    let lines: Vec<String> = ["sendfile", "mapped", "copied", "buffered"]
        .iter()
        .map(|p| {
            let n = if *p == path { bytes } else { 0 };
            format!("foothold_bytes_served_total{{path=\"{p}\"}} {n}")
        })
        .collect();
    agent.metrics_with(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn sendfile_serves_the_blob_byte_for_byte_whole_ranged_and_head() {
    serves_byte_for_byte_whole_ranged_and_head(&["--sendfile", "always"], "sendfile");
}

/// The default on a loopback client: the thread's buffer, not `sendfile`.
#[test]
fn the_buffer_serves_the_blob_byte_for_byte_whole_ranged_and_head() {
    serves_byte_for_byte_whole_ranged_and_head(&[], "buffered");
}

fn serves_byte_for_byte_whole_ranged_and_head(args: &[&str], way: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_with(&tmp.path().join("data"), None, "127.0.0.1:0", args);
    let blob = blob();
    let digest = push(&agent, "zc/blob", &blob);
    let path = format!("/v2/zc/blob/blobs/{digest}");
    let size = blob.len();
    let mut expected_sent = 0u64;

    // A whole GET by curl, as a client writes it to disk.
    let out = tmp.path().join("got");
    let code = stdout(
        Command::new(tool("curl"))
            .args(["-sS", "--http1.1", "-w", "%{http_code}", "-o"])
            .arg(&out)
            .arg(agent.url(&path)),
    );
    assert_eq!(code, "200");
    assert!(std::fs::read(&out).unwrap() == blob, "curl got other bytes");
    expected_sent += size as u64;

    // Ranges within a chunk, across the chunks' 8 MiB boundaries, the first and last bytes, a suffix, and the
    // rest from an offset — all on one kept-alive connection, with a HEAD between them.
    let mb8 = 8 << 20;
    let ranges: [(usize, usize); 6] = [
        (0, 0),
        (100, 65_635),
        (mb8 - 10, mb8 + 10),
        (mb8 - 1, 2 * mb8),
        (size - 1, size - 1),
        (3, size - 1),
    ];
    let mut conn = connect(&agent);
    let (_, headers, _) = exchange(&mut conn, "HEAD", &path, "");
    // Named by its digest, a blob never changes under that name.
    assert_eq!(
        header(&headers, "cache-control"),
        "max-age=31536000, immutable"
    );
    for (i, (a, b)) in ranges.into_iter().enumerate() {
        let (code, headers, body) = exchange(
            &mut conn,
            "GET",
            &path,
            &format!("Range: bytes={a}-{b}\r\n"),
        );
        assert_eq!(code, 206, "range {a}-{b}");
        assert_eq!(
            header(&headers, "content-range"),
            format!("bytes {a}-{b}/{size}")
        );
        assert!(body == blob[a..=b], "range {a}-{b} came back other bytes");
        expected_sent += body.len() as u64;
        if i == 2 {
            let (code, headers, body) = exchange(&mut conn, "HEAD", &path, "");
            assert_eq!(code, 200);
            assert_eq!(header(&headers, "content-length"), size.to_string());
            assert!(body.is_empty());
        }
    }
    let (code, _, body) = exchange(&mut conn, "GET", &path, "Range: bytes=-5000\r\n");
    assert_eq!(code, 206);
    assert!(body == blob[size - 5000..]);
    expected_sent += 5000;
    // And a whole GET after them on the same connection.
    let (code, _, body) = exchange(&mut conn, "GET", &path, "");
    assert_eq!(code, 200);
    assert!(
        body == blob,
        "a whole GET after ranges came back other bytes"
    );
    expected_sent += size as u64;

    // Every body byte left the one way, none any other.
    served_only(&agent, way, expected_sent);
}

/// The agent's open descriptors and its mappings of `blob_hex`'s file.
fn held(agent: &Agent, blob_hex: &str) -> (usize, usize) {
    let pid = agent.child.id();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    (fds, maps.lines().filter(|l| l.contains(blob_hex)).count())
}

#[test]
fn a_client_gone_mid_body_costs_only_its_connection() {
    gone_mid_body_costs_only_its_connection(&["--sendfile", "always"], "sendfile");
}

#[test]
fn a_client_gone_mid_buffered_body_costs_only_its_connection() {
    gone_mid_body_costs_only_its_connection(&[], "buffered");
}

fn gone_mid_body_costs_only_its_connection(args: &[&str], way: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start_with(&tmp.path().join("data"), None, "127.0.0.1:0", args);
    let blob = blob();
    let digest = push(&agent, "zc/gone", &blob);
    let hex = digest.trim_start_matches("sha256:").to_owned();
    let path = format!("/v2/zc/gone/blobs/{digest}");
    let (fds_before, _) = held(&agent, &hex);
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut conn = connect(&agent);
        write!(
            conn.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        .unwrap();
        let mut first = vec![0; 64 << 10];
        conn.read_exact(&mut first).unwrap();
        conns.push(conn);
    }
    // Eight bodies in flight, stalled on clients that do not read: each holds its file and a lent chunk.
    let (fds, maps) = held(&agent, &hex);
    assert!(
        fds >= fds_before + 8 && maps >= 1,
        "{fds} descriptors, {maps} mappings"
    );
    // Hung up with most of the body unread: the agent's sendfile or write fails with EPIPE or ECONNRESET (a
    // process that did not ignore SIGPIPE would die here).
    drop(conns);
    support::wait_for(
        "the hung-up bodies to let go of their files and mappings",
        Duration::from_secs(30),
        || {
            let (fds, maps) = held(&agent, &hex);
            (fds <= fds_before && maps == 0).then_some(())
        },
    );
    let gone = served(&agent, way);
    assert!(
        gone < 8 * blob.len() as u64,
        "the hung-up bodies were counted whole: {gone}"
    );
    // The agent still serves, byte for byte, and counts exactly that body on top.
    let mut conn = connect(&agent);
    let (code, _, body) = exchange(&mut conn, "GET", &path, "");
    assert_eq!(code, 200);
    assert!(body == blob);
    served_only(&agent, way, gone + blob.len() as u64);
}

#[test]
fn http2_keeps_the_mapped_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), None);
    let blob = blob();
    let digest = push(&agent, "zc/h2", &blob);
    let out = tmp.path().join("got");
    // HTTP/2 without TLS (prior knowledge): h2 frames copy the data, so the chunks are not lent.
    let version = stdout(
        Command::new(tool("curl"))
            .args([
                "-sSf",
                "--http2-prior-knowledge",
                "-w",
                "%{http_version}",
                "-o",
            ])
            .arg(&out)
            .arg(agent.url(&format!("/v2/zc/h2/blobs/{digest}"))),
    );
    assert_eq!(version, "2");
    assert!(std::fs::read(&out).unwrap() == blob);
    assert_eq!(served(&agent, "mapped"), blob.len() as u64);
    assert_eq!(served(&agent, "sendfile"), 0);
}

#[test]
fn sendfile_never_reads_through_mappings() {
    let blob = blob();
    // "false" is what the flag took when it was a boolean.
    for value in ["never", "false"] {
        let tmp = tempfile::tempdir().unwrap();
        let agent = Agent::start_with(
            &tmp.path().join("data"),
            None,
            "127.0.0.1:0",
            &["--sendfile", value],
        );
        let digest = push(&agent, "zc/off", &blob);
        let mut conn = connect(&agent);
        let path = format!("/v2/zc/off/blobs/{digest}");
        let (code, _, body) = exchange(&mut conn, "GET", &path, "Range: bytes=5-9000000\r\n");
        assert_eq!(code, 206);
        assert!(body == blob[5..=9_000_000]);
        served_only(&agent, "mapped", body.len() as u64);
    }
}

/// By default the way follows the client's address: a client on another host (here, another address than the
/// one the agent answers on) gets bodies by sendfile, as a compute node does; one that reaches the agent from
/// the address it answers on is on its host, and gets them through the buffer. In a network namespace of the
/// test's own, whose loopback link holds both addresses (neither in 127.0.0.0/8, which is always this host).
#[test]
fn by_default_the_way_follows_the_clients_address() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut cmd = Command::new("unshare");
    cmd.env("IP", tool("ip"))
        .args(["--net", "sh", "-ec"])
        .arg(
            r#"$IP link set lo up; $IP addr add 10.77.0.1/32 dev lo; $IP addr add 10.77.0.2/32 dev lo
               exec "$@""#,
        )
        .arg("sh")
        .arg(agent_bin())
        .args(["serve", "--no-controllers", "--listen", "10.77.0.1:0", "--data"])
        .arg(&data);
    let agent = Agent::spawn(cmd, &data, None);
    // curl in the agent's namespace (unshare and sh exec'd the agent: its pid is the child's).
    let curl = |args: &[&str]| {
        let mut c = Command::new(tool("nsenter"));
        c.arg(format!("--net=/proc/{}/ns/net", agent.child.id()))
            .arg(tool("curl"))
            .args(["-sSf", "--max-time", "60"])
            .args(args);
        c
    };
    let blob = blob();
    let digest = support::sha256_digest(&blob);
    let file = tmp.path().join("blob");
    std::fs::write(&file, &blob).unwrap();
    let uploaded = stdout(&mut curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--data-binary",
        &format!("@{}", file.display()),
        &agent.url(&format!("/v2/zc/peer/blobs/uploads/?digest={digest}")),
    ]));
    assert_eq!(uploaded, "201");
    let size = blob.len() as u64;
    let out = tmp.path().join("got");
    let metrics = || stdout(&mut curl(&[&agent.url("/metrics")]));
    for (source, way) in [("10.77.0.2", "sendfile"), ("10.77.0.1", "buffered")] {
        let _ = std::fs::remove_file(&out);
        stdout(&mut curl(&[
            "--interface",
            source,
            "-o",
            out.to_str().unwrap(),
            &agent.url(&format!("/v2/zc/peer/blobs/{digest}")),
        ]));
        assert!(
            std::fs::read(&out).unwrap() == blob,
            "the client at {source} got other bytes"
        );
        let line = format!("foothold_bytes_served_total{{path=\"{way}\"}} {size}");
        let m = metrics();
        assert!(
            m.lines().any(|l| l == line),
            "after a GET from {source}: no {line:?} in\n{m}"
        );
    }
}
