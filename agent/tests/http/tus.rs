//! tus 1.0 at /v1/uploads: the stock Python client (tuspy) uploads a file, the agent is SIGKILLed, a new
//! client resumes from the server's offset; the finished upload is bound to an image record and downloads
//! byte-identical. In-process: the protocol's headers and every refusal, and that a refused chunk leaves
//! nothing behind.

use crate::support;

use std::process::Command;

use crate::support::inproc::{self, call};
use crate::support::{assert_fsck_clean, run, tool, Agent};
use axum::body::Body;
use axum::http::{Method, StatusCode};
use base64::Engine as _;
use rand::{RngCore, SeedableRng};
use sha2::{Digest as _, Sha256};

const TOKEN: &str = "tus-token";

/// tuspy, unmodified; its checksum algorithm set to sha256 (the only one the agent accepts).
const CLIENT: &str = r#"
import hashlib, sys
from tusclient import client
from tusclient.uploader import Uploader
Uploader.CHECKSUM_ALGORITHM_PAIR = ("sha256", hashlib.sha256)
endpoint, token, path, stop_at, url = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = client.TusClient(endpoint, headers={"Authorization": "Bearer " + token})
up = c.uploader(path, chunk_size=1 << 20, metadata={"filename": "site.img"}, upload_checksum=True,
                url=url or None)
up.upload(stop_at=stop_at or None)
print(up.url)
print(up.offset)
"#;

fn tuspy(agent: &Agent, path: &std::path::Path, stop_at: u64, url: &str) -> (String, u64) {
    let out = run(Command::new(tool("python3")).args([
        "-c",
        CLIENT,
        &agent.url("/v1/uploads"),
        TOKEN,
        path.to_str().unwrap(),
        &stop_at.to_string(),
        url,
    ]));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let url = lines.next().expect("upload URL").to_owned();
    let offset = lines.next().expect("offset").parse().unwrap();
    (url, offset)
}

#[test]
fn tuspy_resumes_after_the_agent_is_killed_and_the_upload_binds_to_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("site.img");
    let mut bytes = vec![0u8; 24 << 20];
    rand_chacha::ChaCha8Rng::seed_from_u64(3).fill_bytes(&mut bytes);
    std::fs::write(&file, &bytes).unwrap();

    let mut agent = Agent::start(&data, Some(TOKEN));
    let (url, offset) = tuspy(&agent, &file, 10 << 20, "");
    assert_eq!(offset, 10 << 20);
    assert!(url.contains("/v1/uploads/"), "{url}");
    let id = url.rsplit('/').next().unwrap().to_owned();

    agent.child.kill().unwrap(); // SIGKILL
    agent.child.wait().unwrap();
    let agent = Agent::start_on(&data, Some(TOKEN), &agent.host());
    let http = support::http();
    let head = http
        .head(&agent.url(&format!("/v1/uploads/{id}")))
        .header("Tus-Resumable", "1.0.0")
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["upload-offset"], (10u64 << 20).to_string());
    assert_eq!(head.headers()["upload-length"], (24u64 << 20).to_string());
    let meta = head.headers()["upload-metadata"].to_str().unwrap();
    assert_eq!(
        meta,
        format!(
            "filename {}",
            base64::engine::general_purpose::STANDARD.encode("site.img")
        )
    );

    // A new client process resumes from the server's offset.
    let (_, offset) = tuspy(&agent, &file, 0, &agent.url(&format!("/v1/uploads/{id}")));
    assert_eq!(offset, 24 << 20);

    let bind = http
        .post(&agent.url("/v1/baremetalcluster/acme/edge-1/os_images"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send(
            serde_json::json!({"image_name": "site.img", "tus_upload": format!("/v1/uploads/{id}")})
                .to_string(),
        )
        .unwrap();
    assert_eq!(bind.status(), 201);
    let record: serde_json::Value =
        serde_json::from_str(&bind.into_body().read_to_string().unwrap()).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    assert_eq!(record["upload_complete"], true);
    assert_eq!(record["image_length"], 24u64 << 20);
    assert_eq!(record["sha256"], sha.as_str());

    let got = http
        .get(&agent.url("/files/acme/edge-1/os_images/site.img"))
        .call()
        .unwrap()
        .into_body()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    assert!(got == bytes, "downloaded content differs from the source");
    // Binding consumed the upload.
    let gone = http
        .head(&agent.url(&format!("/v1/uploads/{id}")))
        .header("Tus-Resumable", "1.0.0")
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(gone.status(), 404);
    drop(agent);
    assert_fsck_clean(&data);
}

const TUS: (&str, &str) = ("tus-resumable", "1.0.0");
const OCTETS: (&str, &str) = ("content-type", "application/offset+octet-stream");

async fn create(app: &axum::Router, length: u64) -> String {
    let len = length.to_string();
    let r = call(
        app,
        Method::POST,
        "/v1/uploads",
        &[TUS, ("upload-length", &len)],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(r.header("tus-resumable"), "1.0.0");
    r.header("location")
}

async fn patch(
    app: &axum::Router,
    url: &str,
    at: u64,
    body: &[u8],
    extra: &[(&str, &str)],
) -> inproc::Resp {
    let at = at.to_string();
    let mut headers = vec![TUS, OCTETS, ("upload-offset", at.as_str())];
    headers.extend_from_slice(extra);
    call(app, Method::PATCH, url, &headers, body.to_vec(), true).await
}

async fn offset(app: &axum::Router, url: &str) -> String {
    let r = call(app, Method::HEAD, url, &[TUS], Body::empty(), true).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("cache-control"), "no-store");
    r.header("upload-offset")
}

fn sha256_b64(b: &[u8]) -> String {
    format!(
        "sha256 {}",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(b))
    )
}

#[tokio::test]
async fn the_protocol_and_its_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let app = inproc::app(dir.path());

    let r = call(
        &app,
        Method::OPTIONS,
        "/v1/uploads",
        &[],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.header("tus-version"), "1.0.0");
    assert_eq!(
        r.header("tus-extension"),
        "creation,termination,checksum,expiration"
    );
    assert_eq!(r.header("tus-checksum-algorithm"), "sha256");
    assert!(r.header("tus-max-size").parse::<u64>().unwrap() > 0);

    let refuse = |r: &inproc::Resp, status: u16, code: &str| {
        assert_eq!(r.status.as_u16(), status, "{:?}", r.json());
        assert_eq!(r.json()["error"]["code"], code, "{:?}", r.json());
        assert_eq!(r.header("tus-resumable"), "1.0.0");
    };
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[("upload-length", "5")],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 412, "TUS_VERSION");
    assert_eq!(r.header("tus-version"), "1.0.0");
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[TUS, ("upload-length", "5")],
        Body::empty(),
        false,
    )
    .await;
    refuse(&r, 401, "UNAUTHORIZED");
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[TUS],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 400, "INVALID_REQUEST");
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[TUS, ("upload-length", "-1")],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 400, "INVALID_REQUEST");
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[TUS, ("upload-defer-length", "1")],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 400, "INVALID_REQUEST");
    let huge = (1u64 << 40).to_string();
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[TUS, ("upload-length", &huge)],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 413, "TOO_LARGE");
    let r = call(
        &app,
        Method::POST,
        "/v1/uploads",
        &[
            TUS,
            ("upload-length", "5"),
            ("upload-metadata", "name not*base64"),
        ],
        Body::empty(),
        true,
    )
    .await;
    refuse(&r, 400, "INVALID_REQUEST");

    let url = create(&app, 10).await;
    assert!(url.starts_with("/v1/uploads/"), "{url}");
    assert_eq!(offset(&app, &url).await, "0");

    let r = call(
        &app,
        Method::PATCH,
        &url,
        &[TUS, ("upload-offset", "0")],
        b"hello".to_vec(),
        true,
    )
    .await;
    refuse(&r, 415, "UNSUPPORTED_MEDIA_TYPE");
    let r = patch(&app, &url, 3, b"hello", &[]).await;
    refuse(&r, 409, "OFFSET_MISMATCH");
    assert_eq!(r.header("upload-offset"), "0");
    // A chunk whose checksum does not match is discarded: the offset stays.
    let wrong = sha256_b64(b"other");
    let r = patch(&app, &url, 0, b"hello", &[("upload-checksum", &wrong)]).await;
    refuse(&r, 460, "CHECKSUM_MISMATCH");
    assert_eq!(offset(&app, &url).await, "0");
    let sha1 = "sha1 qvTGHdzF6KLavt4PO0gs2a6pQ00=";
    let r = patch(&app, &url, 0, b"hello", &[("upload-checksum", sha1)]).await;
    refuse(&r, 400, "INVALID_REQUEST");
    let right = sha256_b64(b"hello");
    let r = patch(&app, &url, 0, b"hello", &[("upload-checksum", &right)]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.json());
    assert_eq!(r.header("upload-offset"), "5");
    let r = patch(&app, &url, 5, b"world and more", &[]).await;
    refuse(&r, 413, "TOO_LARGE");
    assert_eq!(offset(&app, &url).await, "5");

    // Binding an unfinished upload, or one that does not exist, is refused.
    let id = url.rsplit('/').next().unwrap();
    let bind = |name: &str, extra: serde_json::Value| {
        let mut body = serde_json::json!({"image_name": name, "tus_upload": id});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    };
    let post = |body: String| {
        call(
            &app,
            Method::POST,
            "/v1/baremetalcluster/o/c/binary_images",
            &[("content-type", "application/json")],
            body,
            true,
        )
    };
    let r = post(bind("tool", serde_json::json!({}))).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json());
    assert_eq!(r.json()["error"]["code"], "TUS_UPLOAD_INCOMPLETE");
    let r = post(serde_json::json!({"image_name": "tool", "tus_upload": "nope"}).to_string()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json());

    let r = patch(&app, &url, 5, b"world", &[]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.json());
    assert_eq!(offset(&app, &url).await, "10");

    let r = post(bind("tool", serde_json::json!({"sha256": "0".repeat(64)}))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    let r = post(bind("tool", serde_json::json!({"image_length": 11}))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    let r = post(bind("tool", serde_json::json!({"image_length": 10}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(
        r.json()["sha256"],
        hex::encode(Sha256::digest(b"helloworld")).as_str()
    );
    let r = inproc::get(&app, "/files/o/c/binary_images/tool").await;
    assert_eq!(r.body, b"helloworld");

    // Termination: an unfinished upload and a finished, unbound one; both are gone afterwards.
    let partial = create(&app, 100).await;
    assert_eq!(
        patch(&app, &partial, 0, b"abc", &[]).await.status,
        StatusCode::NO_CONTENT
    );
    let finished = create(&app, 3).await;
    assert_eq!(
        patch(&app, &finished, 0, b"xyz", &[]).await.status,
        StatusCode::NO_CONTENT
    );
    for u in [&partial, &finished] {
        let r = call(&app, Method::DELETE, u, &[TUS], Body::empty(), true).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        let r = call(&app, Method::HEAD, u, &[TUS], Body::empty(), true).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    // Only the bound content is left: no upload files, one blob.
    assert_eq!(
        std::fs::read_dir(dir.path().join("uploads"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(inproc::stored_blobs(dir.path()), 1);
    // An empty upload is finished as soon as it exists.
    let empty = create(&app, 0).await;
    assert_eq!(offset(&app, &empty).await, "0");
    inproc::assert_fsck_clean(dir.path());
}
