//! Permissions in handler signatures: a handler that takes [`WriteAccess`] runs only for a request carrying
//! the write token, one that takes [`ReadAccess`] only for a request allowed to read records and files. A
//! refusal is the REST API's 401 (the registry, whose errors have their own format, asks [`Access`] itself).

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::StatusCode;

use super::error::ApiError;
pub use super::state::Access;

/// The request carries the write token (or no token is configured).
pub struct WriteAccess;

/// The request may read BPA records and `/files` (anyone, unless `--files-require-token`).
pub struct ReadAccess;

impl Access {
    pub fn permits_read(&self, parts: &Parts) -> bool {
        !self.files_need_token || self.auth.permits_write(&parts.headers)
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "this request needs the write token",
    )
}

impl<S: Send + Sync> FromRequestParts<S> for WriteAccess
where
    Access: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if Access::from_ref(state).auth.permits_write(&parts.headers) {
            Ok(WriteAccess)
        } else {
            Err(unauthorized())
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ReadAccess
where
    Access: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if Access::from_ref(state).permits_read(parts) {
            Ok(ReadAccess)
        } else {
            Err(unauthorized())
        }
    }
}
