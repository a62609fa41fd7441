//! What a manifest's descriptors must say of what they reference: the true size, and for an index pushed over
//! HTTP, manifests that are there.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::registry_api::{image_manifest, push_blob};
use crate::support::inproc::{app, call, digest};

/// A descriptor must tell the truth about its size, and an index pushed over HTTP must have its manifests
/// (only an import with `--present-platforms` keeps an index whose other platforms are absent).
#[tokio::test]
async fn descriptors_that_lie_and_indexes_with_missing_manifests_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let app = app(tmp.path());
    let config = b"{\"lie\":1}".to_vec();
    let layer = vec![7u8; 500];
    let c = push_blob(&app, "liar", &config).await;
    let l = push_blob(&app, "liar", &layer).await;
    let put = |reference: String, media_type: &'static str, body: Vec<u8>| {
        let app = app.clone();
        async move {
            call(
                &app,
                Method::PUT,
                &format!("/v2/liar/manifests/{reference}"),
                &[("content-type", media_type)],
                body,
                true,
            )
            .await
        }
    };
    const IMAGE: &str = "application/vnd.oci.image.manifest.v1+json";
    const INDEX: &str = "application/vnd.oci.image.index.v1+json";
    let lying = image_manifest(&c, config.len(), &[(&l, layer.len() + 1)]);
    let r = put("lying".into(), IMAGE, lying).await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (400, "MANIFEST_INVALID")
    );
    assert!(
        r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("says 501 bytes; it has 500"),
        "{:?}",
        r.json()
    );

    let honest = image_manifest(&c, config.len(), &[(&l, layer.len())]);
    let r = put("honest".into(), IMAGE, honest.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let index = |digest: &str, size: usize| {
        serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": INDEX,
            "manifests": [{"mediaType": IMAGE, "digest": digest, "size": size}]}))
        .unwrap()
    };
    let absent = digest(b"a manifest never pushed");
    let r = put("sparse".into(), INDEX, index(&absent, 10)).await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (400, "MANIFEST_BLOB_UNKNOWN")
    );
    let r = put(
        "lying-index".into(),
        INDEX,
        index(&digest(&honest), honest.len() - 1),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.code().as_str()),
        (400, "MANIFEST_INVALID")
    );
    let r = put("index".into(), INDEX, index(&digest(&honest), honest.len())).await;
    assert_eq!(r.status, StatusCode::CREATED);
}
