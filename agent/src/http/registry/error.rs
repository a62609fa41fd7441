//! Registry errors and their wire form: the distribution-spec error codes, HTTP statuses and JSON bodies,
//! decided here and nowhere else.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::http::limits::LimitReached;
use crate::manifest::ManifestError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{0}")]
    NameInvalid(String),
    #[error("repository {0} is not known")]
    NameUnknown(String),
    #[error("{0}")]
    DigestInvalid(String),
    #[error("{0}")]
    BlobUnknown(String),
    #[error("{0}")]
    BlobUploadInvalid(String),
    #[error("{0}")]
    BlobUploadUnknown(String),
    #[error("{0}")]
    ManifestInvalid(String),
    #[error("manifest exceeds the 4 MiB limit")]
    ManifestTooLarge,
    #[error(
        "manifest nests arrays and objects more than {} levels deep",
        crate::json_depth::MAX_JSON_DEPTH
    )]
    ManifestTooDeep,
    #[error("{0}")]
    ManifestUnknown(String),
    #[error("{0}")]
    ManifestBlobUnknown(String),
    #[error("{0}")]
    SizeInvalid(String),
    #[error("{0}")]
    PaginationInvalid(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Unsupported(String),
    /// A chunk out of order: 416 with the current range.
    #[error("chunk out of order; upload is at offset {offset}")]
    RangeInvalid { offset: u64, location: String },
    #[error("storage is full")]
    StorageFull,
    #[error("{0}")]
    TooManyRequests(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::auth::Denied> for RegistryError {
    fn from(d: crate::auth::Denied) -> Self {
        match d {
            crate::auth::Denied::Unauthenticated(m) => RegistryError::Unauthorized(m),
            crate::auth::Denied::Forbidden(m) => RegistryError::Denied(m),
        }
    }
}

impl RegistryError {
    pub fn code(&self) -> &'static str {
        use RegistryError::*;
        match self {
            NameInvalid(_) => "NAME_INVALID",
            NameUnknown(_) => "NAME_UNKNOWN",
            DigestInvalid(_) => "DIGEST_INVALID",
            BlobUnknown(_) => "BLOB_UNKNOWN",
            BlobUploadInvalid(_) | RangeInvalid { .. } => "BLOB_UPLOAD_INVALID",
            BlobUploadUnknown(_) => "BLOB_UPLOAD_UNKNOWN",
            ManifestInvalid(_) | ManifestTooLarge | ManifestTooDeep => "MANIFEST_INVALID",
            ManifestUnknown(_) => "MANIFEST_UNKNOWN",
            ManifestBlobUnknown(_) => "MANIFEST_BLOB_UNKNOWN",
            SizeInvalid(_) => "SIZE_INVALID",
            PaginationInvalid(_) => "PAGINATION_NUMBER_INVALID",
            Unauthorized(_) => "UNAUTHORIZED",
            Denied(_) => "DENIED",
            Unsupported(_) => "UNSUPPORTED",
            StorageFull | Internal(_) => "UNKNOWN",
            TooManyRequests(_) => "TOOMANYREQUESTS",
        }
    }

    pub fn status(&self) -> StatusCode {
        use RegistryError::*;
        match self {
            NameInvalid(_)
            | DigestInvalid(_)
            | BlobUploadInvalid(_)
            | ManifestInvalid(_)
            | ManifestTooDeep
            | SizeInvalid(_)
            | PaginationInvalid(_)
            | ManifestBlobUnknown(_) => StatusCode::BAD_REQUEST,
            NameUnknown(_) | BlobUnknown(_) | BlobUploadUnknown(_) | ManifestUnknown(_) => {
                StatusCode::NOT_FOUND
            }
            ManifestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Denied(_) => StatusCode::FORBIDDEN,
            Unsupported(_) => StatusCode::METHOD_NOT_ALLOWED,
            RangeInvalid { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The limit on clients this error enforces, for `foothold_limit_reached_total`.
    pub fn limit(&self) -> Option<&'static str> {
        match self {
            RegistryError::ManifestTooLarge => Some(LimitReached::MANIFEST_SIZE),
            RegistryError::ManifestTooDeep => Some(LimitReached::JSON_DEPTH),
            _ => None,
        }
    }
}

impl From<StoreError> for RegistryError {
    fn from(e: StoreError) -> Self {
        use RegistryError as R;
        match e {
            StoreError::BlobUnknown(d) => {
                R::BlobUnknown(format!("blob {d} is not in the repository"))
            }
            StoreError::ManifestUnknown(r) => {
                R::ManifestUnknown(format!("manifest {r} is not in the repository"))
            }
            StoreError::UploadUnknown(id) => {
                R::BlobUploadUnknown(format!("upload {id} is not known"))
            }
            StoreError::OutOfOrder { expected, .. } => R::RangeInvalid {
                offset: expected,
                location: String::new(),
            },
            e @ StoreError::DigestMismatch { .. } => R::DigestInvalid(e.to_string()),
            e @ StoreError::SizeMismatch { .. } => R::SizeInvalid(e.to_string()),
            StoreError::ManifestTooLarge => R::ManifestTooLarge,
            StoreError::ManifestInvalid(ManifestError::TooDeep) => R::ManifestTooDeep,
            e @ StoreError::ManifestInvalid(_) => R::ManifestInvalid(e.to_string()),
            e @ StoreError::ManifestBlobUnknown { .. } => R::ManifestBlobUnknown(e.to_string()),
            e @ StoreError::InUse { .. } => R::Denied(e.to_string()),
            e @ StoreError::BodyInterrupted(_) => R::BlobUploadInvalid(e.to_string()),
            StoreError::StorageFull => R::StorageFull,
            e @ StoreError::TooManyUploads(_) => R::TooManyRequests(e.to_string()),
            e @ (StoreError::Io(_)
            | StoreError::Meta(_)
            | StoreError::Import(_)
            | StoreError::ChunkRejected) => R::Internal(e.to_string()),
        }
    }
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        if let RegistryError::Internal(msg) = &self {
            tracing::error!(error = %msg, "registry request failed");
        }
        let status = self.status();
        let body =
            json!({"errors": [{"code": self.code(), "message": self.to_string(), "detail": {}}]});
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(limit) = self.limit() {
            resp.extensions_mut().insert(LimitReached(limit));
        }
        let headers = resp.headers_mut();
        match &self {
            RegistryError::Unauthorized(_) => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Basic realm="foothold""#),
                );
            }
            RegistryError::RangeInvalid { offset, location } => {
                if let Ok(v) = HeaderValue::from_str(&format!("0-{}", offset.saturating_sub(1))) {
                    headers.insert(header::RANGE, v);
                }
                if let Ok(v) = HeaderValue::from_str(location) {
                    headers.insert(header::LOCATION, v);
                }
            }
            _ => {}
        }
        resp
    }
}
