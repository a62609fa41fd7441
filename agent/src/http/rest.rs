//! The BPA REST API (`/v1/baremetalcluster/...`, paths and field names of Akraino ICN's BPA REST agent).
//! Handlers translate HTTP to `images` calls and back; errors become JSON bodies in `error`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use super::access::{Caller, ReadAccess};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::limits::LimitReached;
use super::schema::{
    ClusterObject, ClusterPath, ClusterStatus, CollectionPath, KubeState, MultipartMetadata,
    RecordPath, StatusImages,
};
use super::state::{AppState, Limits};
use crate::images::{parse_kind, Images, Key, Kind, NewImage, Record};
use crate::json_depth;
use crate::store::Store;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/baremetalcluster/{owner}/{cluster}/status", get(status))
        .route(
            "/v1/baremetalcluster/{owner}/{cluster}/{kind}",
            get(list).post(create),
        )
        .route(
            "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}",
            get(read)
                .head(read)
                .put(update)
                .patch(append)
                .delete(remove),
        )
}

fn images(store: &Arc<Store>, limits: Limits) -> Images<'_> {
    Images::new(store, limits.max_image_length)
}

/// How long the status endpoint waits for the apiserver before answering without the installation status.
const KUBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[utoipa::path(get, path = "/v1/baremetalcluster/{owner}/{cluster}/status", tag = "images",
    params(
        ClusterPath,
    ),
    responses(
        (status = 200, description = "The cluster's images by type, and its Provisioning and Software status", body = ClusterStatus),
        (status = 400, description = "Invalid owner or cluster name", body = ErrorBody),
        (status = 401, description = "Reads need a credential on this site", body = ErrorBody),
    ),
    security((), ("token" = [])))]
pub(super) async fn status(
    _: ReadAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    State(controllers): State<crate::controllers::Shared>,
    Path((owner, cluster)): Path<(String, String)>,
) -> ApiResult {
    let mut images_by_kind = StatusImages::default();
    for record in images(&store, limits).list(&owner, &cluster, None).await? {
        let of_kind = match record.image_type.parse::<Kind>() {
            Ok(Kind::Binary) => &mut images_by_kind.binary_images,
            Ok(Kind::Os) => &mut images_by_kind.os_images,
            Ok(Kind::Container) => &mut images_by_kind.container_images,
            Err(_) => continue,
        };
        of_kind.push(record);
    }
    let unavailable = |error: String| KubeState {
        state: "unavailable",
        error: Some(error),
    };
    let (provisioning, software, kubernetes) = match controllers.kube() {
        None => (
            Vec::new(),
            Vec::new(),
            KubeState {
                state: "disabled",
                error: None,
            },
        ),
        Some((client, ns)) => {
            let query =
                crate::controllers::bpa::cluster_status(&client, ns.as_deref(), &owner, &cluster);
            match tokio::time::timeout(KUBE_TIMEOUT, query).await {
                Ok(Ok((p, s))) => (
                    p.into_iter().map(ClusterObject::from).collect(),
                    s.into_iter().map(ClusterObject::from).collect(),
                    KubeState {
                        state: "ok",
                        error: None,
                    },
                ),
                Ok(Err(e)) => (Vec::new(), Vec::new(), unavailable(e.to_string())),
                Err(_) => (
                    Vec::new(),
                    Vec::new(),
                    unavailable(format!("no answer from the apiserver in {KUBE_TIMEOUT:?}")),
                ),
            }
        }
    };
    Ok(Json(ClusterStatus {
        owner,
        cluster,
        images: images_by_kind,
        provisioning,
        software,
        kubernetes,
    })
    .into_response())
}

#[utoipa::path(get, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}", tag = "images",
    params(
        CollectionPath,
    ),
    responses(
        (status = 200, description = "The records of this type", body = Vec<Record>),
        (status = 400, description = "Invalid name or image type", body = ErrorBody),
        (status = 401, description = "Reads need a credential on this site", body = ErrorBody),
    ),
    security((), ("token" = [])))]
pub(super) async fn list(
    _: ReadAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path((owner, cluster, kind)): Path<(String, String, String)>,
) -> ApiResult {
    let kind = parse_kind(&kind)?;
    Ok(Json(
        images(&store, limits)
            .list(&owner, &cluster, Some(kind))
            .await?,
    )
    .into_response())
}

#[utoipa::path(post, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}", tag = "images",
    params(
        CollectionPath,
    ),
    request_body(content(
        (NewImage = "application/json"),
        (MultipartMetadata = "multipart/form-data"),
    )),
    responses(
        (status = 201, description = "Created; content follows by PATCH (or came from a tus upload)", body = Record,
            headers(("location" = String, description = "The record's URL"))),
        (status = 400, description = "Invalid name, type or metadata", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential does not write this owner's records", body = ErrorBody),
        (status = 404, description = "The tus upload to bind does not exist, or is another writer's", body = ErrorBody),
        (status = 409, description = "The record exists already, or the tus upload is unfinished", body = ErrorBody),
        (status = 413, description = "image_length is over the limit", body = ErrorBody),
        (status = 422, description = "The tus upload does not match, or the container archive is invalid", body = ErrorBody),
        (status = 507, description = "Storage is full", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn create(
    caller: Caller,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path((owner, cluster, kind)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    caller.may_write_owner(&owner)?;
    let new: NewImage = if is_multipart(&headers) {
        metadata_part(&headers, body).await?
    } else {
        json_body(body, "image metadata").await?
    };
    new.echo
        .agrees(&owner, &cluster, &kind)
        .map_err(|e| ApiError::invalid(format!("image metadata: {e}")))?;
    if new.echo.image_offset.is_some_and(|o| o != 0) || new.echo.upload_complete == Some(true) {
        return Err(ApiError::invalid("image metadata: a new record has no content yet: image_offset 0, upload_complete false"));
    }
    let record = images(&store, limits)
        .create((&owner, &cluster, &kind), new, caller.uploader())
        .await?;
    use crate::names::url_segment as seg;
    let location = format!(
        "/v1/baremetalcluster/{}/{}/{}/{}",
        seg(&owner),
        seg(&cluster),
        seg(&kind),
        seg(&record.image_name)
    );
    let mut r = (StatusCode::CREATED, Json(record)).into_response();
    let v = HeaderValue::from_str(&location).expect("percent-encoded is ASCII");
    r.headers_mut().insert(header::LOCATION, v);
    Ok(r)
}

/// Metadata is JSON of a few KiB: anything past 1 MiB is refused rather than buffered; `what` prefixes the
/// parse error.
pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    body: Body,
    what: &str,
) -> ApiResult<T> {
    let bytes = axum::body::to_bytes(body, 1 << 20).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_LARGE",
            "image metadata is limited to 1 MiB",
        )
        .limit(LimitReached::METADATA_SIZE)
    })?;
    parse_json(&bytes, what)
}

/// Parses a client's JSON, refusing documents nested past [`json_depth::MAX_JSON_DEPTH`] before the parser
/// sees them.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> ApiResult<T> {
    if json_depth::exceeds(bytes, json_depth::MAX_JSON_DEPTH) {
        return Err(ApiError::invalid(format!(
            "{what}: JSON nests arrays and objects more than {} levels deep",
            json_depth::MAX_JSON_DEPTH
        ))
        .limit(LimitReached::JSON_DEPTH));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid(format!("{what}: {e}")))
}

/// A body in ICN's multipart form (see [`metadata_part`]).
fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.trim_start().starts_with("multipart/form-data"))
}

/// ICN's original client sent a multipart form whose `metadata` part holds the JSON; other parts are ignored.
pub(super) async fn metadata_part<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<T> {
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| multer::parse_boundary(t).ok())
        .ok_or_else(|| ApiError::invalid("multipart body without a boundary"))?;
    let limited = http_body_util::Limited::new(body, 1 << 20);
    let mut form = multer::Multipart::new(http_body_util::BodyDataStream::new(limited), boundary);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| ApiError::invalid(format!("multipart form: {e}")))?
    {
        if field.name() == Some("metadata") {
            let bytes = field
                .bytes()
                .await
                .map_err(|e| ApiError::invalid(format!("metadata part: {e}")))?;
            return parse_json(&bytes, "image metadata");
        }
    }
    Err(ApiError::invalid("multipart form has no metadata part"))
}

pub(super) fn key(owner: &str, cluster: &str, kind: &str, name: &str) -> ApiResult<Key> {
    Ok(Key::new(owner, cluster, kind, name)?)
}

#[utoipa::path(get, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}", tag = "images",
    params(
        RecordPath,
    ),
    responses(
        (status = 200, description = "The record (HEAD: headers only)", body = Record,
            headers(("upload-offset" = u64, description = "image_offset"))),
        (status = 400, description = "Invalid name or image type", body = ErrorBody),
        (status = 401, description = "Reads need a credential on this site", body = ErrorBody),
        (status = 404, description = "No such record", body = ErrorBody),
    ),
    security((), ("token" = [])))]
pub(super) async fn read(
    _: ReadAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    method: Method,
    Path((owner, cluster, kind, name)): Path<(String, String, String, String)>,
) -> ApiResult {
    let record = images(&store, limits)
        .get(&key(&owner, &cluster, &kind, &name)?)
        .await?;
    let offset = record.image_offset;
    let mut r = if method == Method::HEAD {
        StatusCode::OK.into_response()
    } else {
        Json(record).into_response()
    };
    r.headers_mut()
        .insert("upload-offset", HeaderValue::from(offset));
    Ok(r)
}

/// The only mutable metadata: name, length and sha256 define the upload. ICN's clients PUT the whole record
/// (its `sample.json`): its name, length, owner, cluster and type must agree; its `image_offset` and
/// `upload_complete` are the server's to say, and what a PUT says of them is not used.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Update {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    description: Option<serde_json::Value>,
    #[serde(default)]
    image_name: Option<String>,
    #[serde(default)]
    image_length: Option<u64>,
    #[serde(flatten)]
    echo: crate::images::RecordEcho,
}

#[utoipa::path(put, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}", tag = "images",
    params(
        RecordPath,
    ),
    request_body(content = Update, content_type = "application/json"),
    responses(
        (status = 200, description = "The updated record", body = Record),
        (status = 400, description = "Invalid name, type or body", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential does not write this owner's records", body = ErrorBody),
        (status = 404, description = "No such record", body = ErrorBody),
        (status = 413, description = "The body is over 1 MiB", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn update(
    caller: Caller,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path((owner, cluster, kind, name)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    caller.may_write_owner(&owner)?;
    let update: Update = if is_multipart(&headers) {
        metadata_part(&headers, body).await?
    } else {
        json_body(body, "only description can change").await?
    };
    update
        .echo
        .agrees(&owner, &cluster, &kind)
        .map_err(|e| ApiError::invalid(format!("only description can change: {e}")))?;
    if let Some(n) = update.image_name.as_ref().filter(|n| **n != name) {
        return Err(ApiError::invalid(format!(
            "only description can change: image_name {n:?} is not the path's {name:?}"
        )));
    }
    let key = key(&owner, &cluster, &kind, &name)?;
    let images = images(&store, limits);
    if let Some(l) = update.image_length {
        let have = images.get(&key).await?.image_length;
        if l != have {
            return Err(ApiError::invalid(format!(
                "only description can change: image_length {l} is not the record's {have}"
            )));
        }
    }
    Ok(Json(images.update(&key, update.description).await?).into_response())
}

#[utoipa::path(patch, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}", tag = "images",
    params(
        RecordPath,
        ("upload-offset" = u64, Header, description = "Where the body starts: the record's image_offset"),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "Appended (the last byte completes and verifies the upload)",
            headers(("upload-offset" = u64, description = "The new image_offset"))),
        (status = 400, description = "Invalid name or type, no Upload-Offset, or the body was cut off (what arrived is kept)", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential does not write this owner's records", body = ErrorBody),
        (status = 404, description = "No such record", body = ErrorBody),
        (status = 409, description = "Upload-Offset differs from image_offset", body = ErrorBody,
            headers(("upload-offset" = u64, description = "The record's image_offset"))),
        (status = 413, description = "The body runs past image_length", body = ErrorBody),
        (status = 422, description = "Already complete, sha256 mismatch, or invalid container archive (the upload restarts at 0)", body = ErrorBody),
        (status = 507, description = "Storage is full", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn append(
    caller: Caller,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path((owner, cluster, kind, name)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    caller.may_write_owner(&owner)?;
    let key = key(&owner, &cluster, &kind, &name)?;
    let offset = headers
        .get("upload-offset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| ApiError::invalid("PATCH needs an Upload-Offset header"))?;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    // Its own task: a client that hangs up mid-body (this handler dropped) still gets what arrived kept,
    // and the last byte still completes the record.
    let record = tokio::spawn(async move {
        images(&store, limits)
            .append(&key, offset, length, body.into_data_stream())
            .await
    })
    .await
    .expect("append task panicked")?;
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert("upload-offset", HeaderValue::from(record.image_offset));
    Ok(r)
}

#[utoipa::path(delete, path = "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}", tag = "images",
    params(
        RecordPath,
    ),
    responses(
        (status = 204, description = "Deleted, with its content unless something else references it"),
        (status = 400, description = "Invalid name or image type", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential does not write this owner's records", body = ErrorBody),
        (status = 404, description = "No such record", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn remove(
    caller: Caller,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path((owner, cluster, kind, name)): Path<(String, String, String, String)>,
) -> ApiResult {
    caller.may_write_owner(&owner)?;
    images(&store, limits)
        .delete(&key(&owner, &cluster, &kind, &name)?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
