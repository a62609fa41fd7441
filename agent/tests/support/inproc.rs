//! The agent's router driven in-process with `tower::ServiceExt::oneshot`.

use std::path::Path;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tower::ServiceExt;

use foothold_agent::auth::Auth;
use foothold_agent::http::{router, AppState};
use foothold_agent::store::Store;

pub const TOKEN: &str = "t0ken";

pub fn app(dir: &Path) -> Router {
    let store = Store::open(dir).unwrap();
    router(AppState::new(store, Auth::from_token(TOKEN)))
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn code(&self) -> String {
        self.json()["errors"][0]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

pub async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
    auth: bool,
) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if auth {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Resp {
        status,
        headers,
        body,
    }
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// An anonymous GET without a body.
pub async fn get(app: &Router, uri: &str) -> Resp {
    call(app, Method::GET, uri, &[], Body::empty(), false).await
}

/// The store at `dir` passes fsck (run in-process).
pub fn assert_fsck_clean(dir: &Path) {
    let report = foothold_agent::fsck::check(dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// How many blob files the store at `dir` holds.
pub fn stored_blobs(dir: &Path) -> usize {
    ["sha256", "sha512"]
        .iter()
        .map(|a| {
            std::fs::read_dir(dir.join("blobs").join(a))
                .unwrap()
                .count()
        })
        .sum()
}
