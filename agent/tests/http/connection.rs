//! A refused request must not cost the client its keep-alive connection: clients reuse pooled connections, and
//! a server that closes one after answering 401 makes the next request on it fail with EOF.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::Agent;

fn read_response(r: &mut BufReader<TcpStream>) -> (u16, Vec<u8>) {
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(
        status.starts_with("HTTP/1.1 "),
        "no response on the kept-alive connection: {status:?}"
    );
    let code = status[9..12].parse().unwrap();
    let mut len = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (code, body)
}

/// One keep-alive connection to the agent: a writer and a buffered reader.
fn connect(agent: &Agent) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(agent.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

#[test]
fn a_refused_write_keeps_the_connection_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some("tok"));
    let (mut w, mut r) = connect(&agent);
    let body = vec![b'{'; 64 * 1024];
    write!(w, "PUT /v2/a/manifests/v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
    w.write_all(&body).unwrap();
    assert_eq!(read_response(&mut r).0, 401);
    write!(w, "PUT /v2/Bad/manifests/v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 2\r\n\r\n{{}}").unwrap();
    assert_eq!(read_response(&mut r).0, 400);
    write!(w, "GET /v2/_catalog HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (code, body) = read_response(&mut r);
    assert_eq!(
        (code, String::from_utf8(body).unwrap().as_str()),
        (200, r#"{"repositories":[]}"#)
    );
}

#[test]
fn a_refused_rest_upload_keeps_the_connection_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some("tok"));
    let (mut w, mut r) = connect(&agent);
    let body = vec![7u8; 256 * 1024];
    write!(w, "PATCH /v1/baremetalcluster/a/b/os_images/x HTTP/1.1\r\nHost: x\r\nUpload-Offset: 0\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
    w.write_all(&body).unwrap();
    assert_eq!(read_response(&mut r).0, 401);
    write!(
        w,
        "GET /v1/baremetalcluster/a/b/os_images HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let (code, body) = read_response(&mut r);
    assert_eq!(
        (code, String::from_utf8(body).unwrap().as_str()),
        (200, "[]")
    );
}
