//! Permissions in handler signatures. The router identifies every request once (`auth::Auth::identify`) and
//! puts the [`Caller`] in its extensions; a handler that takes [`ReadAccess`] runs only for a request that may
//! read, one that takes [`WriteAccess`] only for a writer, and one that writes a particular repository or
//! owner takes the [`Caller`] and asks it. A refusal is the REST API's 401 (no credential, or an unknown one)
//! or 403 (a credential whose scope does not cover it); the registry, whose errors have their own format, maps
//! [`Denied`] itself.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;

use super::error::ApiError;
pub use super::state::Access;
pub use crate::auth::{Caller, Denied};

/// The request may write: any writer (tus uploads), who it is.
pub struct WriteAccess(pub Caller);

impl WriteAccess {
    /// The writer as tus uploads know it: it sees its own uploads, or all of them for an admin.
    pub fn uploader(&self) -> crate::auth::Uploader<'_> {
        self.0.uploader()
    }
}

/// The request may read (anyone, unless reads need a credential).
pub struct ReadAccess;

impl<S: Send + Sync> FromRequestParts<S> for Caller
where
    Access: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(match parts.extensions.get::<Caller>() {
            Some(c) => c.clone(),
            None => Access::from_ref(state).auth.identify(&parts.headers),
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for WriteAccess
where
    Access: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Ok(caller) = Caller::from_request_parts(parts, state).await;
        caller.may_upload()?;
        Ok(WriteAccess(caller))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ReadAccess
where
    Access: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Ok(caller) = Caller::from_request_parts(parts, state).await;
        caller.may_read()?;
        Ok(ReadAccess)
    }
}
