//! Content digests. The store is sha256-only (`blobs/sha256/<hex>`); other algorithms are parsed so that
//! a client gets a clear "unsupported" answer rather than a confusing "invalid" one.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// A validated `sha256:<64 lowercase hex>` digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    #[error("digest {0:?} is not of the form <algorithm>:<hex>")]
    Malformed(String),
    #[error("digest algorithm {0:?} is not supported (only sha256)")]
    UnsupportedAlgorithm(String),
}

impl Digest {
    pub fn from_sha256(hasher: Sha256) -> Self {
        Digest {
            hex: hex::encode(hasher.finalize()),
        }
    }

    pub fn of_bytes(bytes: &[u8]) -> Self {
        Digest::from_sha256(Sha256::new_with_prefix(bytes))
    }

    /// The 64 hex characters, as used for the blob's file name.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (algorithm, encoded) = s
            .split_once(':')
            .ok_or_else(|| DigestError::Malformed(s.to_owned()))?;
        // Grammar from the image-spec: algorithm-component ([a-z0-9]+) joined by [+._-], encoded [a-zA-Z0-9=_-]+.
        let algorithm_ok = !algorithm.is_empty()
            && algorithm.split(['+', '.', '_', '-']).all(|c| {
                !c.is_empty()
                    && c.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            });
        let encoded_ok = !encoded.is_empty()
            && encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"=_-".contains(&b));
        if !algorithm_ok || !encoded_ok {
            return Err(DigestError::Malformed(s.to_owned()));
        }
        if algorithm != "sha256" {
            return Err(DigestError::UnsupportedAlgorithm(algorithm.to_owned()));
        }
        if encoded.len() != 64
            || !encoded
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::Malformed(s.to_owned()));
        }
        Ok(Digest {
            hex: encoded.to_owned(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Serialised as its string form (`sha256:<hex>`), as in OCI descriptors.
impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_sha256() {
        let d = Digest::of_bytes(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
    }

    #[test]
    fn rejects_bad_digests() {
        for bad in [
            "",
            "sha256",
            "sha256:",
            ":abc",
            "sha256:XYZ",
            "sha256:abc",
            &format!("sha256:{}", "A".repeat(64)),
            "SHA256:00",
        ] {
            assert!(
                matches!(bad.parse::<Digest>(), Err(DigestError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            format!("sha512:{}", "a".repeat(128)).parse::<Digest>(),
            Err(DigestError::UnsupportedAlgorithm(_))
        ));
    }
}
