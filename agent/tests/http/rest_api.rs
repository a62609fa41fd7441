//! The BPA REST API and /files, driven in-process: the upload lifecycle across a restart, key isolation,
//! verification, and a table of bad requests that must each get their status and leave nothing visible.

use crate::support;

use crate::support::inproc::{app, assert_fsck_clean, call, digest, get, stored_blobs};
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

const BASE: &str = "/v1/baremetalcluster/acme/edge1";

fn content(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect()
}

fn hex_of(bytes: &[u8]) -> String {
    digest(bytes)[7..].to_owned()
}

async fn create(app: &axum::Router, path: &str, meta: Value) -> support::inproc::Resp {
    call(
        app,
        Method::POST,
        path,
        &[("content-type", "application/json")],
        serde_json::to_vec(&meta).unwrap(),
        true,
    )
    .await
}

#[tokio::test]
async fn resumable_upload_then_download_with_ranges_and_checksum() {
    let tmp = tempfile::tempdir().unwrap();
    let data = content(3_000_000);
    let sha = hex_of(&data);
    let item = format!("{BASE}/os_images/ubuntu.img");
    {
        let app = app(tmp.path());
        let r = create(&app, &format!("{BASE}/os_images"), json!({"image_name": "ubuntu.img", "image_length": data.len(), "sha256": sha, "description": {"image_records": [{"os": "ubuntu"}]}})).await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.json()["image_offset"], 0);
        assert_eq!(r.json()["upload_complete"], false);
        assert_eq!(r.header("location"), item);
        let r = call(
            &app,
            Method::PATCH,
            &item,
            &[("upload-offset", "0")],
            data[..1_000_000].to_vec(),
            true,
        )
        .await;
        assert_eq!(
            (r.status, r.header("upload-offset")),
            (StatusCode::NO_CONTENT, "1000000".to_owned())
        );
        // A stale offset is refused with the real one.
        let r = call(
            &app,
            Method::PATCH,
            &item,
            &[("upload-offset", "0")],
            data[..10].to_vec(),
            true,
        )
        .await;
        assert_eq!(
            (r.status, r.header("upload-offset")),
            (StatusCode::CONFLICT, "1000000".to_owned())
        );
    }
    // A restarted agent resumes from the stored offset.
    let app = app(tmp.path());
    let r = call(&app, Method::HEAD, &item, &[], Body::empty(), false).await;
    assert_eq!(r.header("upload-offset"), "1000000");
    let r = get(&app, "/files/acme/edge1/os_images/ubuntu.img").await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "an incomplete image is not served"
    );
    for (from, to) in [(1_000_000, 2_500_000), (2_500_000, 3_000_000)] {
        let r = call(
            &app,
            Method::PATCH,
            &item,
            &[("upload-offset", &from.to_string())],
            data[from..to].to_vec(),
            true,
        )
        .await;
        assert_eq!(
            (r.status, r.header("upload-offset")),
            (StatusCode::NO_CONTENT, to.to_string())
        );
    }
    let r = get(&app, &item).await;
    let rec = r.json();
    assert_eq!(
        (
            rec["upload_complete"].clone(),
            rec["image_offset"].clone(),
            rec["sha256"].clone()
        ),
        (json!(true), json!(3_000_000), json!(sha))
    );
    assert_eq!(rec["description"]["image_records"][0]["os"], "ubuntu");
    let r = call(
        &app,
        Method::PATCH,
        &item,
        &[("upload-offset", "3000000")],
        b"x".to_vec(),
        true,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].as_str()),
        (422, Some("UPLOAD_COMPLETE"))
    );

    let file = "/files/acme/edge1/os_images/ubuntu.img";
    let r = get(&app, file).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body == data);
    let etag = r.header("etag");
    assert_eq!(etag, format!("\"sha256:{sha}\""));
    assert!(r.header("last-modified").ends_with(" GMT"));
    let r = call(
        &app,
        Method::GET,
        file,
        &[("range", "bytes=100-199")],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(
        (r.status, r.header("content-range")),
        (
            StatusCode::PARTIAL_CONTENT,
            "bytes 100-199/3000000".to_owned()
        )
    );
    assert_eq!(r.body, data[100..200]);
    let r = call(
        &app,
        Method::GET,
        file,
        &[("if-none-match", &etag)],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let r = get(&app, &format!("{file}.sha256sum")).await;
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        format!("{sha}  ubuntu.img\n")
    );

    let r = get(&app, &format!("{BASE}/status")).await;
    assert_eq!(
        r.json()["images"]["os_images"][0]["image_name"],
        "ubuntu.img"
    );
    // Without controllers there is no installation status to add (tests/bpa.rs covers it with an apiserver).
    assert_eq!(r.json()["kubernetes"], json!({"state": "disabled"}));
    assert_eq!(r.json()["provisioning"], json!([]));
    let r = call(
        &app,
        Method::PUT,
        &item,
        &[],
        serde_json::to_vec(&json!({"description": {"note": "golden"}})).unwrap(),
        true,
    )
    .await;
    assert_eq!(r.json()["description"]["note"], "golden");

    assert_fsck_clean(tmp.path());
    let r = call(&app, Method::DELETE, &item, &[], Body::empty(), true).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(get(&app, &item).await.status, StatusCode::NOT_FOUND);
    assert!(
        !tmp.path().join("blobs/sha256").join(&sha).exists(),
        "deleted content must go"
    );
    assert_fsck_clean(tmp.path());
}

#[tokio::test]
async fn keys_include_owner_and_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    for (owner, cluster, bytes) in [
        ("acme", "edge1", b"one".to_vec()),
        ("acme", "edge2", b"two!".to_vec()),
        ("other", "edge1", b"three".to_vec()),
    ] {
        let path = format!("/v1/baremetalcluster/{owner}/{cluster}/binary_images");
        assert_eq!(
            create(
                &app,
                &path,
                json!({"image_name": "tool", "image_length": bytes.len()})
            )
            .await
            .status,
            StatusCode::CREATED
        );
        let r = call(
            &app,
            Method::PATCH,
            &format!("{path}/tool"),
            &[("upload-offset", "0")],
            bytes.clone(),
            true,
        )
        .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
    let r = get(&app, "/files/acme/edge2/binary_images/tool").await;
    assert_eq!(r.body, b"two!");
    let r = get(&app, "/v1/baremetalcluster/other/edge1/binary_images").await;
    assert_eq!(r.json().as_array().unwrap().len(), 1);
    assert_eq!(r.json()[0]["sha256"], hex_of(b"three"));
}

#[tokio::test]
async fn a_sha256_mismatch_discards_the_upload() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let claimed = hex_of(b"what was promised");
    let r = create(
        &app,
        &format!("{BASE}/binary_images"),
        json!({"image_name": "bin", "image_length": 5, "sha256": claimed}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = call(
        &app,
        Method::PATCH,
        &format!("{BASE}/binary_images/bin"),
        &[("upload-offset", "0")],
        b"other".to_vec(),
        true,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].as_str()),
        (422, Some("DIGEST_MISMATCH"))
    );
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&claimed) && message.contains(&hex_of(b"other")),
        "{message}"
    );
    let r = get(&app, &format!("{BASE}/binary_images/bin")).await;
    assert_eq!(
        (
            r.json()["image_offset"].clone(),
            r.json()["upload_complete"].clone()
        ),
        (json!(0), json!(false))
    );
    assert_eq!(stored_blobs(tmp.path()), 0);
    assert_fsck_clean(tmp.path());
}

#[tokio::test]
async fn bad_requests_get_their_status_and_store_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let good = json!({"image_name": "a.img", "image_length": 4});
    assert_eq!(
        create(&app, &format!("{BASE}/os_images"), good.clone())
            .await
            .status,
        StatusCode::CREATED
    );
    let long = "x".repeat(256);
    // (what, method, uri, headers, body, authenticated, expected status)
    type Case<'a> = (
        &'a str,
        Method,
        String,
        Vec<(&'a str, &'a str)>,
        Vec<u8>,
        bool,
        u16,
    );
    let cases: Vec<Case> = vec![
        (
            "name with a slash",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "a/b", "image_length": 1})).unwrap(),
            true,
            400,
        ),
        (
            "dot-dot name",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "..", "image_length": 1})).unwrap(),
            true,
            400,
        ),
        (
            "control character",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "a\u{7}b", "image_length": 1})).unwrap(),
            true,
            400,
        ),
        (
            "name too long",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": long, "image_length": 1})).unwrap(),
            true,
            400,
        ),
        (
            "dot-dot cluster",
            Method::GET,
            "/v1/baremetalcluster/acme/../os_images".to_owned(),
            vec![],
            vec![],
            false,
            400,
        ),
        (
            "unknown image type",
            Method::GET,
            format!("{BASE}/iso_images"),
            vec![],
            vec![],
            false,
            400,
        ),
        (
            "not JSON",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            b"{".to_vec(),
            true,
            400,
        ),
        (
            "unknown field",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "z", "image_length": 1, "imagelength": 2}))
                .unwrap(),
            true,
            400,
        ),
        (
            "bad sha256",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "z", "image_length": 1, "sha256": "abc"}))
                .unwrap(),
            true,
            400,
        ),
        (
            "too large",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "z", "image_length": u64::MAX})).unwrap(),
            true,
            413,
        ),
        (
            "duplicate",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&good).unwrap(),
            true,
            409,
        ),
        (
            "unauthenticated create",
            Method::POST,
            format!("{BASE}/os_images"),
            vec![],
            serde_json::to_vec(&json!({"image_name": "z", "image_length": 1})).unwrap(),
            false,
            401,
        ),
        (
            "unauthenticated patch",
            Method::PATCH,
            format!("{BASE}/os_images/a.img"),
            vec![("upload-offset", "0")],
            b"abcd".to_vec(),
            false,
            401,
        ),
        (
            "unauthenticated delete",
            Method::DELETE,
            format!("{BASE}/os_images/a.img"),
            vec![],
            vec![],
            false,
            401,
        ),
        (
            "patch without offset",
            Method::PATCH,
            format!("{BASE}/os_images/a.img"),
            vec![],
            b"ab".to_vec(),
            true,
            400,
        ),
        (
            "chunk past the length",
            Method::PATCH,
            format!("{BASE}/os_images/a.img"),
            vec![("upload-offset", "0")],
            b"abcdef".to_vec(),
            true,
            413,
        ),
        (
            "unknown image",
            Method::PATCH,
            format!("{BASE}/os_images/nope"),
            vec![("upload-offset", "0")],
            b"ab".to_vec(),
            true,
            404,
        ),
        (
            "incomplete file",
            Method::GET,
            "/files/acme/edge1/os_images/a.img".to_owned(),
            vec![],
            vec![],
            false,
            404,
        ),
        (
            "container images are not files",
            Method::GET,
            "/files/acme/edge1/container_images/a.img".to_owned(),
            vec![],
            vec![],
            false,
            404,
        ),
    ];
    for (what, method, uri, headers, body, auth, status) in cases {
        let r = call(&app, method, &uri, &headers, body, auth).await;
        assert_eq!(
            r.status.as_u16(),
            status,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        if status != 400 || !uri.contains("/../") {
            assert!(
                r.json()["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{what}: no JSON error body"
            );
        }
    }
    // Still exactly the one good record, at offset 0, and nothing stored.
    let r = get(&app, &format!("{BASE}/os_images")).await;
    assert_eq!(r.json().as_array().unwrap().len(), 1);
    assert_eq!(r.json()[0]["image_offset"], 0);
    assert_eq!(stored_blobs(tmp.path()), 0);
    assert_fsck_clean(tmp.path());
}

#[tokio::test]
async fn create_accepts_the_original_multipart_form() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let body = "--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\nContent-Type: application/json\r\n\r\n\
                {\"image_name\": \"fw.bin\", \"image_length\": 3}\r\n\
                --XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"fw.bin\"\r\n\r\nignored\r\n--XyZ--\r\n";
    let ct = [("content-type", "multipart/form-data; boundary=XyZ")];
    let r = call(
        &app,
        Method::POST,
        &format!("{BASE}/binary_images"),
        &ct,
        body.as_bytes().to_vec(),
        true,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        (
            r.json()["image_name"].clone(),
            r.json()["image_length"].clone()
        ),
        (json!("fw.bin"), json!(3))
    );
    let without = "--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--XyZ--\r\n";
    let r = call(
        &app,
        Method::POST,
        &format!("{BASE}/binary_images"),
        &ct,
        without.as_bytes().to_vec(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no metadata part"));
}

#[tokio::test]
async fn reads_can_require_a_credential_on_every_protocol() {
    use foothold_agent::auth::{Auth, Credential, Reads, Scope};
    use foothold_agent::{http, store::Store};
    let tmp = tempfile::tempdir().unwrap();
    let auth = Auth::fixed(
        vec![
            Credential::new("admin", Scope::Admin, support::inproc::TOKEN),
            Credential::new("nodes", Scope::Read, "node-read-token"),
        ],
        Reads::Credential,
        Vec::new(),
    );
    let state = http::AppState::new(Store::open(tmp.path()).unwrap(), auth);
    let app = http::router(state);
    assert_eq!(
        create(
            &app,
            &format!("{BASE}/binary_images"),
            json!({"image_name": "t", "image_length": 2})
        )
        .await
        .status,
        StatusCode::CREATED
    );
    let r = call(
        &app,
        Method::PATCH,
        &format!("{BASE}/binary_images/t"),
        &[("upload-offset", "0")],
        b"ok".to_vec(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    for path in [
        "/files/acme/edge1/binary_images/t",
        "/files/acme/edge1/binary_images/t.sha256sum",
        &format!("{BASE}/binary_images/t"),
        &format!("{BASE}/binary_images"),
        &format!("{BASE}/status"),
        "/v2/_catalog",
    ] {
        let r = get(&app, path).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(r.header("www-authenticate").starts_with("Basic"), "{path}");
        let r = call(&app, Method::GET, path, &[], Body::empty(), true).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        let r = call(
            &app,
            Method::GET,
            path,
            &[("authorization", "Bearer node-read-token")],
            Body::empty(),
            false,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{path} with the read credential");
    }
    // The apt repository too (this state serves none: past the credential, it is not there).
    let r = get(&app, "/apt/foothold.asc").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The read credential writes nothing, and says so.
    let r = call(
        &app,
        Method::DELETE,
        &format!("{BASE}/binary_images/t"),
        &[("authorization", "Bearer node-read-token")],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.json()["error"]["code"], "FORBIDDEN");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("credential nodes is read-only"));
}

#[tokio::test]
async fn concurrent_patches_at_one_offset_let_exactly_one_win() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let data = content(4_000_000);
    let item = format!("{BASE}/os_images/race.img");
    assert_eq!(
        create(
            &app,
            &format!("{BASE}/os_images"),
            json!({"image_name": "race.img", "image_length": data.len()})
        )
        .await
        .status,
        StatusCode::CREATED
    );
    let patch = |bytes: Vec<u8>| {
        let (app, item) = (app.clone(), item.clone());
        tokio::spawn(async move {
            call(
                &app,
                Method::PATCH,
                &item,
                &[("upload-offset", "0")],
                bytes,
                true,
            )
            .await
        })
    };
    let (a, b) = (
        patch(data[..2_000_000].to_vec()),
        patch(data[..2_000_000].to_vec()),
    );
    let mut statuses = vec![
        a.await.unwrap().status.as_u16(),
        b.await.unwrap().status.as_u16(),
    ];
    statuses.sort();
    assert_eq!(statuses, vec![204, 409]);
    let r = call(
        &app,
        Method::PATCH,
        &item,
        &[("upload-offset", "2000000")],
        data[2_000_000..].to_vec(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = get(&app, "/files/acme/edge1/os_images/race.img").await;
    assert!(r.body == data);
}
