//! Content digests: the two algorithms the OCI image-spec registers, `sha256` and `sha512`. The store keeps a
//! blob under `blobs/<algorithm>/<hex>`; any other algorithm is parsed so that a client gets a clear
//! "unsupported" answer rather than a confusing "invalid" one.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256, Sha512};

/// A registered digest algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

impl Algorithm {
    pub const ALL: [Algorithm; 2] = [Algorithm::Sha256, Algorithm::Sha512];

    /// The name in a digest string and in the store's `blobs/<name>/` directory.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// Length of the encoded (lowercase hex) part.
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }

    pub fn hasher(self) -> Hasher {
        match self {
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(Sha512::new()),
        }
    }

    fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A running hash of one algorithm.
#[derive(Clone)]
pub enum Hasher {
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Default for Hasher {
    fn default() -> Self {
        Algorithm::Sha256.hasher()
    }
}

impl Hasher {
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Hasher::Sha256(_) => Algorithm::Sha256,
            Hasher::Sha512(_) => Algorithm::Sha512,
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    pub fn finish(self) -> Digest {
        let (algorithm, hex) = match self {
            Hasher::Sha256(h) => (Algorithm::Sha256, hex::encode(h.finalize())),
            Hasher::Sha512(h) => (Algorithm::Sha512, hex::encode(h.finalize())),
        };
        Digest { algorithm, hex }
    }
}

/// A validated `<algorithm>:<lowercase hex>` digest of a registered algorithm.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    #[error("digest {0:?} is not of the form <algorithm>:<hex>")]
    Malformed(String),
    #[error("digest algorithm {0:?} is not supported (only sha256 and sha512)")]
    UnsupportedAlgorithm(String),
}

impl Digest {
    /// The sha256 digest of `bytes` (what the store names new content by).
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Digest::of_bytes_with(Algorithm::Sha256, bytes)
    }

    pub fn of_bytes_with(algorithm: Algorithm, bytes: &[u8]) -> Self {
        let mut h = algorithm.hasher();
        h.update(bytes);
        h.finish()
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The lowercase hex characters, as used for the blob's file name.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The digest from a file name under `blobs/<algorithm>/`, if it is one.
    pub fn from_parts(algorithm: Algorithm, hex: &str) -> Option<Self> {
        format!("{algorithm}:{hex}").parse().ok()
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
        let algorithm = Algorithm::from_name(algorithm)
            .ok_or_else(|| DigestError::UnsupportedAlgorithm(algorithm.to_owned()))?;
        if encoded.len() != algorithm.hex_len()
            || !encoded
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::Malformed(s.to_owned()));
        }
        Ok(Digest {
            algorithm,
            hex: encoded.to_owned(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Serialised as its string form (`<algorithm>:<hex>`), as in OCI descriptors.
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
            format!("sha384:{}", "a".repeat(96)).parse::<Digest>(),
            Err(DigestError::UnsupportedAlgorithm(_))
        ));
        for bad in [
            format!("sha512:{}", "a".repeat(64)),
            format!("sha256:{}", "a".repeat(128)),
        ] {
            assert!(
                matches!(bad.parse::<Digest>(), Err(DigestError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sha512_is_registered() {
        let d = Digest::of_bytes_with(Algorithm::Sha512, b"");
        assert_eq!(d.algorithm(), Algorithm::Sha512);
        assert_eq!(
            d.to_string(),
            "sha512:cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce\
             47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert_eq!(Digest::from_parts(Algorithm::Sha512, d.hex()), Some(d));
        assert_eq!(Digest::from_parts(Algorithm::Sha256, "00"), None);
    }

    proptest::proptest! {
        /// A hasher fed in pieces agrees with hashing the whole, for both algorithms.
        #[test]
        fn incremental_hashing_agrees(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512), cut in 0usize..512) {
            for algorithm in Algorithm::ALL {
                let cut = cut.min(data.len());
                let mut h = algorithm.hasher();
                h.update(&data[..cut]);
                h.update(&data[cut..]);
                proptest::prop_assert_eq!(h.finish(), Digest::of_bytes_with(algorithm, &data));
            }
        }
    }
}
