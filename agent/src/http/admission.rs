//! The API server's admission webhook for BareMetalHosts (admission.k8s.io/v1 `AdmissionReview`): a host that
//! runs a node of a BPA cluster is not deleted, deprovisioned, given another image or powered off before its
//! node is drained (the rules: `controllers::bpa::hold`). The answer depends only on the review's own objects
//! and changes nothing, so any caller may ask; a body that is not a v1 review is a 400 with the REST API's
//! JSON error.

use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::state::AppState;
use crate::controllers::bpa::hold;
use crate::crd::metal3::BareMetalHost;

pub fn routes() -> Router<AppState> {
    Router::new().route(hold::WEBHOOK_PATH, post(baremetalhosts))
}

const API_VERSION: &str = "admission.k8s.io/v1";
/// A review holds the object twice (before and after); etcd keeps an object to 1.5 MiB.
const MAX_REVIEW: usize = 4 << 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    operation: String,
    #[serde(default)]
    object: Option<BareMetalHost>,
    #[serde(default)]
    old_object: Option<BareMetalHost>,
}

async fn baremetalhosts(body: Body) -> Result<Json<Value>, ApiError> {
    let body = axum::body::to_bytes(body, MAX_REVIEW).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_LARGE",
            format!("an AdmissionReview is limited to {} MiB", MAX_REVIEW >> 20),
        )
    })?;
    let review: Review = super::rest::parse_json(&body, "AdmissionReview")?;
    if review.api_version != API_VERSION {
        return Err(ApiError::invalid(format!(
            "AdmissionReview: apiVersion {:?}, this webhook answers {API_VERSION}",
            review.api_version
        )));
    }
    let r = review
        .request
        .ok_or_else(|| ApiError::invalid("AdmissionReview: no request"))?;
    let verdict = match (r.operation.as_str(), &r.old_object, &r.object) {
        ("DELETE", Some(old), _) => hold::admit(old, None),
        ("UPDATE", Some(old), Some(new)) => hold::admit(old, Some(new)),
        ("UPDATE" | "DELETE", _, _) => {
            return Err(ApiError::invalid(format!(
                "AdmissionReview: a {} without the objects it changes",
                r.operation
            )))
        }
        // A new host runs no node yet.
        _ => Ok(()),
    };
    let response = match verdict {
        Ok(()) => json!({"uid": r.uid, "allowed": true}),
        Err(message) => json!({"uid": r.uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": message}}),
    };
    Ok(Json(
        json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}),
    ))
}
