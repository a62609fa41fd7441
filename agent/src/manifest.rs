//! Parsing and validating pushed manifests: OCI image manifests and indexes, Docker schema 2 manifests and
//! manifest lists. Pure: bytes in, typed summary out. What a manifest references is what the store must hold
//! before a tag may point at it.

use std::collections::BTreeMap;

use oci_spec::image::Descriptor;
use serde::Deserialize;

use crate::digest::Digest;

pub const MAX_MANIFEST_SIZE: usize = 4 * 1024 * 1024;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const SUPPORTED: [&str; 4] = [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// A config or layer blob.
    Blob,
    /// A child manifest of an index.
    Manifest,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParsedManifest {
    pub media_type: String,
    /// What must exist in the repository before this manifest is accepted, with the size its descriptor
    /// declares.
    pub references: Vec<(Digest, RefKind, u64)>,
    pub subject: Option<Digest>,
    /// `artifactType`, or for image manifests without one the config's media type (referrers API rule).
    pub artifact_type: Option<String>,
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ManifestError {
    #[error("manifest is not valid JSON: {0}")]
    Json(String),
    #[error("schemaVersion must be 2")]
    SchemaVersion,
    #[error("media type {0:?} is not a supported manifest type")]
    UnsupportedMediaType(String),
    #[error("Content-Type {header:?} disagrees with the manifest's mediaType {body:?}")]
    MediaTypeMismatch { header: String, body: String },
    #[error("media type could not be determined: no usable Content-Type and no mediaType field")]
    UnknownMediaType,
    #[error("{0}")]
    Shape(String),
    #[error("descriptor digest {0:?}: {1}")]
    Digest(String, String),
    #[error(
        "manifest nests arrays and objects more than {} levels deep",
        crate::json_depth::MAX_JSON_DEPTH
    )]
    TooDeep,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    schema_version: Option<u32>,
    media_type: Option<String>,
    artifact_type: Option<String>,
    config: Option<Descriptor>,
    layers: Option<Vec<Descriptor>>,
    manifests: Option<Vec<Descriptor>>,
    subject: Option<Descriptor>,
    annotations: Option<BTreeMap<String, String>>,
}

/// Strip parameters (`; charset=utf-8`) and whitespace from a Content-Type.
pub fn bare_media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<ParsedManifest, ManifestError> {
    if crate::json_depth::exceeds(body, crate::json_depth::MAX_JSON_DEPTH) {
        return Err(ManifestError::TooDeep);
    }
    let raw: Raw = serde_json::from_slice(body).map_err(|e| ManifestError::Json(e.to_string()))?;
    if raw.schema_version != Some(2) {
        return Err(ManifestError::SchemaVersion);
    }
    let header = content_type
        .map(bare_media_type)
        .filter(|t| SUPPORTED.contains(t) || t.contains("manifest"));
    let media_type = match (header, raw.media_type.as_deref()) {
        (Some(h), Some(b)) if h != b => {
            return Err(ManifestError::MediaTypeMismatch {
                header: h.to_owned(),
                body: b.to_owned(),
            })
        }
        (Some(h), _) => h.to_owned(),
        (None, Some(b)) => b.to_owned(),
        // OCI allows mediaType to be absent: infer from the shape.
        (None, None) if raw.manifests.is_some() => OCI_INDEX.to_owned(),
        (None, None) if raw.config.is_some() => OCI_MANIFEST.to_owned(),
        (None, None) => return Err(ManifestError::UnknownMediaType),
    };
    if !SUPPORTED.contains(&media_type.as_str()) {
        return Err(ManifestError::UnsupportedMediaType(media_type));
    }
    let is_index = media_type == OCI_INDEX || media_type == DOCKER_LIST;
    let mut references = Vec::new();
    let mut artifact_type = raw.artifact_type.clone();
    if is_index {
        if raw.config.is_some() || raw.layers.is_some() {
            return Err(ManifestError::Shape(
                "an index has no config or layers".into(),
            ));
        }
        let children = raw
            .manifests
            .ok_or_else(|| ManifestError::Shape("an index needs a manifests list".into()))?;
        for d in &children {
            references.push((descriptor_digest(d)?, RefKind::Manifest, d.size()));
        }
    } else {
        if raw.manifests.is_some() {
            return Err(ManifestError::Shape(
                "an image manifest has no manifests list".into(),
            ));
        }
        let config = raw
            .config
            .ok_or_else(|| ManifestError::Shape("an image manifest needs a config".into()))?;
        references.push((descriptor_digest(&config)?, RefKind::Blob, config.size()));
        if artifact_type.is_none() {
            artifact_type = Some(config.media_type().to_string());
        }
        let layers = raw
            .layers
            .ok_or_else(|| ManifestError::Shape("an image manifest needs a layers list".into()))?;
        for d in &layers {
            let digest = descriptor_digest(d)?;
            // Foreign (non-distributable) layers live at their `urls`, not in this registry.
            if d.urls().as_ref().is_some_and(|u| !u.is_empty()) {
                continue;
            }
            references.push((digest, RefKind::Blob, d.size()));
        }
    }
    let subject = raw.subject.as_ref().map(descriptor_digest).transpose()?;
    Ok(ParsedManifest {
        media_type,
        references,
        subject,
        artifact_type,
        annotations: raw.annotations,
    })
}

fn descriptor_digest(d: &Descriptor) -> Result<Digest, ManifestError> {
    let text = d.digest().to_string();
    text.parse()
        .map_err(|e: crate::digest::DigestError| ManifestError::Digest(text, e.to_string()))
}

/// Whether a stored manifest of `media_type` may be served to a client that sent these Accept values.
/// Like CNCF distribution: a client that names manifest types but not ours gets "unknown", so an old
/// Docker-only client is not handed an OCI index it cannot read. No Accept, or a wildcard, accepts all.
pub fn accepted(media_type: &str, accept: &[&str]) -> bool {
    let types: Vec<&str> = accept
        .iter()
        .flat_map(|v| v.split(','))
        .map(bare_media_type)
        .filter(|t| !t.is_empty())
        .collect();
    types.is_empty()
        || types.iter().any(|t| {
            *t == media_type || *t == "*/*" || *t == "application/*" || *t == "application/json"
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> String {
        format!("sha256:{}", hex::encode([n; 32]))
    }

    fn image(extra: &str) -> String {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}",
              "config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":2}},
              "layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":3}},
                        {{"mediaType":"application/vnd.oci.image.layer.nondistributable.v1.tar","digest":"{}","size":3,"urls":["https://x"]}}]{extra}}}"#,
            d(1),
            d(2),
            d(3)
        )
    }

    #[test]
    fn image_manifest_references_config_and_distributable_layers() {
        let m = parse(Some(OCI_MANIFEST), image("").as_bytes()).unwrap();
        assert_eq!(
            m.references,
            vec![
                (d(1).parse().unwrap(), RefKind::Blob, 2),
                (d(2).parse().unwrap(), RefKind::Blob, 3)
            ]
        );
        assert_eq!(
            m.artifact_type.as_deref(),
            Some("application/vnd.oci.image.config.v1+json")
        );
        assert_eq!(m.subject, None);
    }

    #[test]
    fn subject_and_artifact_type() {
        let extra = format!(
            r#","artifactType":"application/x.sig","subject":{{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":9}}"#,
            d(9)
        );
        let m = parse(None, image(&extra).as_bytes()).unwrap();
        assert_eq!(m.subject, Some(d(9).parse().unwrap()));
        assert_eq!(m.artifact_type.as_deref(), Some("application/x.sig"));
    }

    #[test]
    fn index_references_children() {
        let body = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":5}}]}}"#,
            d(4)
        );
        let m = parse(Some(OCI_INDEX), body.as_bytes()).unwrap();
        assert_eq!(m.media_type, OCI_INDEX);
        assert_eq!(
            m.references,
            vec![(d(4).parse().unwrap(), RefKind::Manifest, 5)]
        );
    }

    #[test]
    fn rejects_bad_manifests() {
        assert!(matches!(parse(None, b"{"), Err(ManifestError::Json(_))));
        assert_eq!(
            parse(None, br#"{"schemaVersion":1}"#),
            Err(ManifestError::SchemaVersion)
        );
        assert!(matches!(
            parse(Some(OCI_INDEX), image("").as_bytes()),
            Err(ManifestError::MediaTypeMismatch { .. })
        ));
        let bad_digest = image("").replace(&d(2), "sha256:nothex");
        assert!(parse(None, bad_digest.as_bytes()).is_err());
        assert!(matches!(
            parse(Some("application/vnd.docker.distribution.manifest.v1+prettyjws"), br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v1+prettyjws"}"#),
            Err(ManifestError::UnsupportedMediaType(_))
        ));
    }

    #[test]
    fn accept_negotiation() {
        assert!(accepted(OCI_INDEX, &[]));
        assert!(accepted(OCI_INDEX, &["*/*"]));
        assert!(accepted(
            OCI_INDEX,
            &[&format!("{DOCKER_MANIFEST}, {OCI_INDEX};q=0.5")]
        ));
        assert!(!accepted(OCI_INDEX, &[DOCKER_MANIFEST, DOCKER_LIST]));
    }
}
