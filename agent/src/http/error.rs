//! The JSON errors of the BPA REST API, the file server and tus uploads: a status and
//! `{"error": {"code", "message"}}`, mapped from the services' errors here and nowhere else.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa::ToSchema;

use super::limits::LimitReached;
use crate::images::ImageError;
use crate::store::StoreError;
use crate::uploads::UploadError;

/// A REST error: status plus `{"error": {"code", "message"}}`.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Sent as Upload-Offset (offset conflicts tell the client where to resume).
    pub offset: Option<u64>,
    /// The limit on clients this refusal enforces (see [`LimitReached`]).
    limit: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            offset: None,
            limit: None,
        }
    }

    /// A request refused for what it says (400 `INVALID_REQUEST`), the way [`ImageError::InvalidRequest`] is.
    pub fn invalid(message: impl Into<String>) -> Self {
        ImageError::InvalidRequest(message.into()).into()
    }

    /// Marks the refusal as a limit on clients reached, counted under `limit`.
    pub fn limit(mut self, limit: &'static str) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl From<ImageError> for ApiError {
    fn from(e: ImageError) -> Self {
        use StatusCode as S;
        let message = e.to_string();
        let (status, code) = match &e {
            ImageError::InvalidName { .. } => (S::BAD_REQUEST, "INVALID_NAME"),
            ImageError::InvalidRequest(_) => (S::BAD_REQUEST, "INVALID_REQUEST"),
            ImageError::NotFound(_) => (S::NOT_FOUND, "NOT_FOUND"),
            ImageError::Exists(_) => (S::CONFLICT, "EXISTS"),
            ImageError::OffsetMismatch { .. } => (S::CONFLICT, "OFFSET_MISMATCH"),
            ImageError::Complete(_) => (S::UNPROCESSABLE_ENTITY, "UPLOAD_COMPLETE"),
            ImageError::Incomplete(_) => (S::NOT_FOUND, "UPLOAD_INCOMPLETE"),
            ImageError::TooLarge(_) => (S::PAYLOAD_TOO_LARGE, "TOO_LARGE"),
            ImageError::DigestMismatch { .. } => (S::UNPROCESSABLE_ENTITY, "DIGEST_MISMATCH"),
            ImageError::Archive { .. } => (S::UNPROCESSABLE_ENTITY, "ARCHIVE_INVALID"),
            ImageError::Mismatch(_) => (S::UNPROCESSABLE_ENTITY, "MISMATCH"),
            ImageError::TusUnknown(_) => (S::NOT_FOUND, "TUS_UPLOAD_UNKNOWN"),
            ImageError::TusIncomplete(_) => (S::CONFLICT, "TUS_UPLOAD_INCOMPLETE"),
            ImageError::Store(StoreError::StorageFull) => (S::INSUFFICIENT_STORAGE, "STORAGE_FULL"),
            ImageError::Store(StoreError::TooManyUploads(_)) => {
                (S::TOO_MANY_REQUESTS, "TOO_MANY_UPLOADS")
            }
            ImageError::Store(StoreError::BodyInterrupted(_)) => {
                (S::BAD_REQUEST, "BODY_INTERRUPTED")
            }
            ImageError::Store(_) => (S::INTERNAL_SERVER_ERROR, "INTERNAL"),
        };
        if status == S::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %message, "REST request failed");
        }
        let offset = match e {
            ImageError::OffsetMismatch { expected, .. } => Some(expected),
            _ => None,
        };
        ApiError {
            status,
            code,
            message,
            offset,
            limit: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response();
        if let Some(limit) = self.limit {
            r.extensions_mut().insert(LimitReached(limit));
        }
        if let Some(o) = self.offset {
            r.headers_mut()
                .insert("upload-offset", HeaderValue::from(o));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="foothold""#),
            );
        }
        r
    }
}

pub type ApiResult<T = Response> = Result<T, ApiError>;

impl From<crate::auth::Denied> for ApiError {
    fn from(d: crate::auth::Denied) -> Self {
        use crate::auth::Denied;
        match d {
            Denied::Unauthenticated(m) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", m)
            }
            Denied::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", m),
        }
    }
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        use StatusCode as S;
        let message = e.to_string();
        let (status, code, offset) = match e {
            UploadError::Store(e) => return ImageError::Store(e).into(),
            UploadError::Unknown(_) => (S::NOT_FOUND, "NOT_FOUND", None),
            UploadError::OffsetMismatch { expected, .. } => {
                (S::CONFLICT, "OFFSET_MISMATCH", Some(expected))
            }
            UploadError::TooLong { .. } | UploadError::PastLength { .. } => {
                (S::PAYLOAD_TOO_LARGE, "TOO_LARGE", None)
            }
            UploadError::ChecksumMismatch => (
                S::from_u16(460).expect("460 is a status"),
                "CHECKSUM_MISMATCH",
                None,
            ),
        };
        ApiError {
            status,
            code,
            message,
            offset,
            limit: None,
        }
    }
}

/// Every error: `{"error": {"code", "message"}}`.
#[derive(ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable, e.g. OFFSET_MISMATCH, DIGEST_MISMATCH, ARCHIVE_INVALID.
    pub code: String,
    pub message: String,
}
