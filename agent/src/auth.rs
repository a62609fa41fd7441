//! Write authorisation: one shared token read from a file at start. Reads are anonymous (compute nodes on the
//! provisioning network pull without credentials); pushes, uploads and deletes present the token as a Bearer
//! token or as the password of HTTP Basic auth (what docker/podman/skopeo `login` send).

use std::path::Path;

use axum::http::{header, HeaderMap};
use base64::Engine as _;

#[derive(Clone, Default)]
pub struct Auth {
    token: Option<String>,
}

impl Auth {
    pub fn none() -> Self {
        Auth { token: None }
    }

    pub fn from_token(token: impl Into<String>) -> Self {
        Auth {
            token: Some(token.into()),
        }
    }

    /// Reads the token from `path` (surrounding whitespace trimmed); an empty file is an error, not "no auth".
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading token file {}", path.display()))?;
        let token = text.trim();
        anyhow::ensure!(!token.is_empty(), "token file {} is empty", path.display());
        Ok(Auth::from_token(token))
    }

    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the request carries the write token (always true when no token is configured).
    pub fn permits_write(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let presented = if let Some(t) = value.strip_prefix("Bearer ") {
            t.trim().to_owned()
        } else if let Some(b) = value.strip_prefix("Basic ") {
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(b.trim()) else {
                return false;
            };
            let Ok(text) = String::from_utf8(decoded) else {
                return false;
            };
            match text.split_once(':') {
                Some((_user, password)) => password.to_owned(),
                None => return false,
            }
        } else {
            return false;
        };
        constant_time_eq(presented.as_bytes(), token.as_bytes())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn tokens() {
        let a = Auth::from_token("s3cret");
        assert!(a.permits_write(&with("Bearer s3cret")));
        let basic = base64::engine::general_purpose::STANDARD.encode("anyone:s3cret");
        assert!(a.permits_write(&with(&format!("Basic {basic}"))));
        assert!(!a.permits_write(&with("Bearer s3cre")));
        assert!(!a.permits_write(&with("Basic !!!")));
        assert!(!a.permits_write(&HeaderMap::new()));
        assert!(Auth::none().permits_write(&HeaderMap::new()));
    }

    #[test]
    fn a_wrong_token_of_the_right_length_is_refused_whichever_byte_differs() {
        let token = "k3yQ9zT0bLw8";
        let a = Auth::from_token(token);
        for i in 0..token.len() {
            let mut wrong = token.as_bytes().to_vec();
            wrong[i] ^= 0x01;
            let wrong = String::from_utf8(wrong).unwrap();
            assert_eq!(wrong.len(), token.len());
            assert!(
                !a.permits_write(&with(&format!("Bearer {wrong}"))),
                "{wrong}"
            );
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("foothold:{wrong}"));
            assert!(
                !a.permits_write(&with(&format!("Basic {basic}"))),
                "{wrong}"
            );
        }
        // Its prefix and an extension of it are no better.
        assert!(!a.permits_write(&with(&format!("Bearer {token}x"))));
        assert!(!a.permits_write(&with("Bearer ")));
    }
}
