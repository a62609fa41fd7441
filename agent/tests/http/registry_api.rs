//! Registry handlers driven in-process (tower `oneshot`): the bad-input table from the spec's error codes,
//! and behaviour real clients rarely reach (resume after restart, deferred blob delete, pagination, ranges,
//! mirror names). Every bad request must leave nothing stored.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::Router;
use serde_json::{json, Value};

use crate::support::inproc::{app, assert_fsck_clean, call, digest, get, stored_blobs};

pub(crate) async fn push_blob(app: &Router, repo: &str, bytes: &[u8]) -> String {
    let d = digest(bytes);
    let r = call(
        app,
        Method::POST,
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        &[],
        bytes.to_vec(),
        true,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    d
}

pub(crate) fn image_manifest(config: &str, config_len: usize, layers: &[(&str, usize)]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_len},
        "layers": layers.iter().map(|(d, s)| json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": s})).collect::<Vec<_>>(),
    }))
    .unwrap()
}

async fn push_image(app: &Router, repo: &str, tag: &str, seed: u8) -> (String, Vec<u8>) {
    let config = format!("{{\"seed\":{seed}}}").into_bytes();
    let layer = vec![seed; 1000 + seed as usize];
    let c = push_blob(app, repo, &config).await;
    let l = push_blob(app, repo, &layer).await;
    let m = image_manifest(&c, config.len(), &[(&l, layer.len())]);
    let r = call(
        app,
        Method::PUT,
        &format!("/v2/{repo}/manifests/{tag}"),
        &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
        m.clone(),
        true,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    (digest(&m), m)
}

#[tokio::test]
async fn bad_input_gets_its_spec_error_and_stores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let missing = digest(b"never uploaded");
    let long_name = format!("/v2/{}/manifests/latest", "a".repeat(256));
    let huge = vec![b' '; 4 * 1024 * 1024 + 1];
    let with_missing_blobs = image_manifest(&missing, 3, &[(&missing, 3)]);
    let sha384 = format!("sha384:{}", "a".repeat(96));

    struct Case<'a> {
        what: &'a str,
        method: Method,
        uri: String,
        headers: Vec<(&'a str, &'a str)>,
        body: Vec<u8>,
        auth: bool,
        status: u16,
        code: &'a str,
    }
    let case = |what, method, uri: &str, body: Vec<u8>, status, code| Case {
        what,
        method,
        uri: uri.to_owned(),
        headers: vec![],
        body,
        auth: true,
        status,
        code,
    };
    let oci = ("content-type", "application/vnd.oci.image.manifest.v1+json");
    let cases = vec![
        case(
            "upper-case name",
            Method::GET,
            "/v2/Library/nginx/manifests/latest",
            vec![],
            400,
            "NAME_INVALID",
        ),
        case(
            "dot-dot component",
            Method::GET,
            "/v2/a/../b/manifests/latest",
            vec![],
            400,
            "NAME_INVALID",
        ),
        case(
            "empty component",
            Method::GET,
            "/v2/a//b/tags/list",
            vec![],
            400,
            "NAME_INVALID",
        ),
        case(
            "name too long",
            Method::GET,
            &long_name,
            vec![],
            400,
            "NAME_INVALID",
        ),
        case(
            "bad mirror namespace",
            Method::GET,
            "/v2/library/x/manifests/1?ns=evil:99",
            vec![],
            400,
            "NAME_INVALID",
        ),
        case(
            "malformed blob digest",
            Method::GET,
            "/v2/a/blobs/sha256:xyz",
            vec![],
            400,
            "DIGEST_INVALID",
        ),
        case(
            "unsupported digest algorithm",
            Method::GET,
            &format!("/v2/a/blobs/{sha384}"),
            vec![],
            400,
            "DIGEST_INVALID",
        ),
        case(
            "malformed monolithic digest",
            Method::POST,
            "/v2/a/blobs/uploads/?digest=sha256:00",
            b"x".to_vec(),
            400,
            "DIGEST_INVALID",
        ),
        case(
            "monolithic digest mismatch",
            Method::POST,
            &format!("/v2/a/blobs/uploads/?digest={missing}"),
            b"other".to_vec(),
            400,
            "DIGEST_INVALID",
        ),
        case(
            "unknown blob",
            Method::GET,
            &format!("/v2/a/blobs/{missing}"),
            vec![],
            404,
            "BLOB_UNKNOWN",
        ),
        case(
            "unknown upload",
            Method::PATCH,
            "/v2/a/blobs/uploads/00000000-0000-0000-0000-000000000000",
            b"x".to_vec(),
            404,
            "BLOB_UPLOAD_UNKNOWN",
        ),
        case(
            "unknown manifest",
            Method::GET,
            "/v2/a/manifests/nope",
            vec![],
            404,
            "MANIFEST_UNKNOWN",
        ),
        case(
            "unknown repository tags",
            Method::GET,
            "/v2/nothing/here/tags/list",
            vec![],
            404,
            "NAME_UNKNOWN",
        ),
        Case {
            headers: vec![oci],
            ..case(
                "manifest not JSON",
                Method::PUT,
                "/v2/a/manifests/v1",
                b"{not json".to_vec(),
                400,
                "MANIFEST_INVALID",
            )
        },
        Case {
            headers: vec![oci],
            ..case(
                "invalid tag on PUT",
                Method::PUT,
                "/v2/a/manifests/-bad",
                b"{}".to_vec(),
                400,
                "MANIFEST_INVALID",
            )
        },
        Case {
            headers: vec![oci],
            ..case(
                "oversized manifest",
                Method::PUT,
                "/v2/a/manifests/v1",
                huge,
                413,
                "MANIFEST_INVALID",
            )
        },
        Case {
            headers: vec![oci],
            ..case(
                "manifest with missing blobs",
                Method::PUT,
                "/v2/a/manifests/v1",
                with_missing_blobs.clone(),
                400,
                "MANIFEST_BLOB_UNKNOWN",
            )
        },
        Case {
            headers: vec![oci],
            ..case(
                "manifest digest mismatch",
                Method::PUT,
                &format!("/v2/a/manifests/{missing}"),
                with_missing_blobs.clone(),
                400,
                "DIGEST_INVALID",
            )
        },
        Case {
            auth: false,
            ..case(
                "unauthenticated monolithic push",
                Method::POST,
                &format!("/v2/a/blobs/uploads/?digest={}", digest(b"x")),
                b"x".to_vec(),
                401,
                "UNAUTHORIZED",
            )
        },
        Case {
            auth: false,
            headers: vec![oci],
            ..case(
                "unauthenticated manifest push",
                Method::PUT,
                "/v2/a/manifests/v1",
                b"{}".to_vec(),
                401,
                "UNAUTHORIZED",
            )
        },
        Case {
            auth: false,
            ..case(
                "unauthenticated delete",
                Method::DELETE,
                &format!("/v2/a/blobs/{missing}"),
                vec![],
                401,
                "UNAUTHORIZED",
            )
        },
        case(
            "unsupported method",
            Method::POST,
            "/v2/a/tags/list",
            vec![],
            405,
            "UNSUPPORTED",
        ),
    ];
    for c in cases {
        let r = call(&app, c.method, &c.uri, &c.headers, c.body, c.auth).await;
        assert_eq!(
            r.status.as_u16(),
            c.status,
            "{}: {}",
            c.what,
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.code(), c.code, "{}", c.what);
        assert!(
            r.json()["errors"][0]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}: no message",
            c.what
        );
        if c.status == 401 {
            assert!(
                r.header("www-authenticate").starts_with("Basic realm="),
                "{}",
                c.what
            );
        }
    }

    // Digest mismatch when finishing a session: the session is discarded, nothing visible.
    let r = call(
        &app,
        Method::POST,
        "/v2/a/blobs/uploads/",
        &[],
        Body::empty(),
        true,
    )
    .await;
    let loc = r.header("location");
    let r = call(
        &app,
        Method::PUT,
        &format!("{loc}?digest={missing}"),
        &[],
        b"some bytes".to_vec(),
        true,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (400, "DIGEST_INVALID")
    );
    let r = get(&app, &loc).await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (404, "BLOB_UPLOAD_UNKNOWN")
    );

    // Out-of-order chunk: 416 with the range the registry has.
    let r = call(
        &app,
        Method::POST,
        "/v2/a/blobs/uploads/",
        &[],
        Body::empty(),
        true,
    )
    .await;
    let loc = r.header("location");
    let r = call(
        &app,
        Method::PATCH,
        &loc,
        &[("content-range", "0-9")],
        vec![1u8; 10],
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(r.header("range"), "0-9");
    let r = call(
        &app,
        Method::PATCH,
        &loc,
        &[("content-range", "20-29")],
        vec![1u8; 10],
        true,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (416, "BLOB_UPLOAD_INVALID")
    );
    assert_eq!(r.header("range"), "0-9");
    let r = call(&app, Method::DELETE, &loc, &[], Body::empty(), true).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);

    // Nothing stored anywhere.
    let r = get(&app, "/v2/_catalog").await;
    assert_eq!(r.json(), json!({"repositories": []}));
    assert_eq!(stored_blobs(tmp.path()), 0);
    assert_eq!(
        std::fs::read_dir(tmp.path().join("uploads"))
            .unwrap()
            .count(),
        0
    );
    assert_fsck_clean(tmp.path());
}

#[tokio::test]
async fn chunked_upload_resumes_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let blob: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let loc = {
        let app = app(tmp.path());
        let r = call(
            &app,
            Method::POST,
            "/v2/r/blobs/uploads/",
            &[],
            Body::empty(),
            true,
        )
        .await;
        let loc = r.header("location");
        let r = call(
            &app,
            Method::PATCH,
            &loc,
            &[("content-range", "0-999999")],
            blob[..1_000_000].to_vec(),
            true,
        )
        .await;
        assert_eq!(r.header("range"), "0-999999");
        loc
    };
    // A new process on the same data directory: the session survives; its offset is what was acknowledged.
    let app = app(tmp.path());
    let r = get(&app, &loc).await;
    assert_eq!(
        (r.status, r.header("range")),
        (StatusCode::NO_CONTENT, "0-999999".to_owned())
    );
    let r = call(
        &app,
        Method::PATCH,
        &loc,
        &[],
        blob[1_000_000..2_000_000].to_vec(),
        true,
    )
    .await;
    assert_eq!(r.header("range"), "0-1999999");
    let d = digest(&blob);
    let r = call(
        &app,
        Method::PUT,
        &format!("{loc}?digest={d}"),
        &[],
        blob[2_000_000..].to_vec(),
        true,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.header("docker-content-digest"), d);
    let r = get(&app, &format!("/v2/r/blobs/{d}")).await;
    assert!(r.body == blob);
    // Ranges: 206 with Content-Range, suffix ranges, 416 past the end.
    let r = call(
        &app,
        Method::GET,
        &format!("/v2/r/blobs/{d}"),
        &[("range", "bytes=10-19")],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.header("content-range"), "bytes 10-19/3000000");
    assert_eq!(r.body, blob[10..20]);
    let r = call(
        &app,
        Method::GET,
        &format!("/v2/r/blobs/{d}"),
        &[("range", "bytes=-5")],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.body, blob[blob.len() - 5..]);
    let r = call(
        &app,
        Method::GET,
        &format!("/v2/r/blobs/{d}"),
        &[("range", "bytes=3000000-")],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_fsck_clean(tmp.path());
}

#[tokio::test]
async fn mirror_requests_use_the_upstream_name() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let (d, m) = push_image(&app, "docker.io/library/nginx", "1.25", 1).await;
    // containerd as a mirror client: /v2/library/nginx/...?ns=docker.io
    let r = get(&app, "/v2/library/nginx/manifests/1.25?ns=docker.io").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("docker-content-digest"), d);
    assert_eq!(r.body, m);
    // Without ns it is a different repository.
    let r = get(&app, "/v2/library/nginx/manifests/1.25").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tags_and_catalog_paginate_with_link_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let (d, m) = push_image(&app, "p/q", "a", 1).await;
    for tag in ["b", "c", "d", "e"] {
        let r = call(
            &app,
            Method::PUT,
            &format!("/v2/p/q/manifests/{tag}"),
            &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
            m.clone(),
            true,
        )
        .await;
        assert_eq!(r.header("docker-content-digest"), d);
    }
    let r = get(&app, "/v2/p/q/tags/list?n=2").await;
    assert_eq!(r.json(), json!({"name": "p/q", "tags": ["a", "b"]}));
    assert_eq!(
        r.header("link"),
        "</v2/p/q/tags/list?n=2&last=b>; rel=\"next\""
    );
    let r = get(&app, "/v2/p/q/tags/list?n=2&last=d").await;
    assert_eq!(r.json()["tags"], json!(["e"]));
    assert_eq!(r.header("link"), "");
    push_image(&app, "p/r", "x", 2).await;
    let r = get(&app, "/v2/_catalog?n=1").await;
    assert_eq!(r.json(), json!({"repositories": ["p/q"]}));
    assert_eq!(
        r.header("link"),
        "</v2/_catalog?n=1&last=p/q>; rel=\"next\""
    );
}

#[tokio::test]
async fn deletes_keep_every_tag_pullable() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let (d, m) = push_image(&app, "del/me", "v1", 7).await;
    let manifest: Value = serde_json::from_slice(&m).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();

    // Deleting a referenced blob is accepted but deferred: the tagged image stays whole.
    let r = call(
        &app,
        Method::DELETE,
        &format!("/v2/del/me/blobs/{layer}"),
        &[],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = get(&app, &format!("/v2/del/me/blobs/{layer}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_fsck_clean(tmp.path());

    // An index pins its children: the child cannot be deleted under it.
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": m.len()}]}))
    .unwrap();
    let r = call(
        &app,
        Method::PUT,
        "/v2/del/me/manifests/multi",
        &[("content-type", "application/vnd.oci.image.index.v1+json")],
        index.clone(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = call(
        &app,
        Method::DELETE,
        &format!("/v2/del/me/manifests/{d}"),
        &[],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!((r.status.as_u16(), r.code().as_str()), (403, "DENIED"));
    // A Docker-only client is not handed an OCI index.
    let r = call(
        &app,
        Method::GET,
        "/v2/del/me/manifests/multi",
        &[(
            "accept",
            "application/vnd.docker.distribution.manifest.v2+json",
        )],
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Delete the index, then the manifest: tags go, the deferred blob goes with its last reference.
    let r = call(
        &app,
        Method::DELETE,
        &format!("/v2/del/me/manifests/{}", digest(&index)),
        &[],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = call(
        &app,
        Method::DELETE,
        &format!("/v2/del/me/manifests/{d}"),
        &[],
        Body::empty(),
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = get(&app, "/v2/del/me/manifests/v1").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = get(&app, &format!("/v2/del/me/blobs/{layer}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        !tmp.path().join("blobs/sha256").join(&layer[7..]).exists(),
        "an unreferenced blob file must be removed"
    );
    assert_fsck_clean(tmp.path());
}
