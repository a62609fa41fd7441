//! Types of the REST API's and the file server's wire format for the OpenAPI document that the handlers' own
//! types do not carry: path parameters and the multipart form, which exist only to be described, and the status
//! body, which the status handler answers.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

/// The image types of a cluster.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ImageKindDoc {
    BinaryImages,
    OsImages,
    ContainerImages,
}

/// The image types the file server serves (container images come from the registry).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum FileKindDoc {
    BinaryImages,
    OsImages,
}

/// ICN's original client: a form whose `metadata` part is the JSON of NewImage.
#[derive(ToSchema)]
pub struct MultipartMetadata {
    /// NewImage as JSON text.
    pub metadata: String,
}

/// `GET .../status`: a cluster's images by type, and the Kubernetes objects installing it: Provisionings with
/// the `owner` label and this cluster name, and the Softwares labelled with the cluster in their namespaces.
/// The handler answers this very type, so the document cannot drift from the body.
#[derive(Serialize, ToSchema)]
pub struct ClusterStatus {
    pub owner: String,
    pub cluster: String,
    pub images: StatusImages,
    pub provisioning: Vec<ClusterObject>,
    pub software: Vec<ClusterObject>,
    pub kubernetes: KubeState,
}

/// A Provisioning or Software and its status (as in its CRD).
#[derive(Serialize, ToSchema)]
pub struct ClusterObject {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub status: Option<serde_json::Value>,
}

impl<S: Serialize> From<crate::controllers::bpa::Summary<S>> for ClusterObject {
    fn from(s: crate::controllers::bpa::Summary<S>) -> Self {
        ClusterObject {
            namespace: s.namespace,
            name: s.name,
            generation: s.generation,
            // A CRD status is plain data: serialising it cannot fail.
            status: s.status.and_then(|st| serde_json::to_value(st).ok()),
        }
    }
}

/// Whether the installation status could be read: `disabled` (no controllers configured), `ok`, or
/// `unavailable` with the error (the listed objects are then empty).
#[derive(Serialize, ToSchema)]
pub struct KubeState {
    #[schema(pattern = "^(disabled|ok|unavailable)$")]
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize, ToSchema, Default)]
pub struct StatusImages {
    pub binary_images: Vec<crate::images::Record>,
    pub os_images: Vec<crate::images::Record>,
    pub container_images: Vec<crate::images::Record>,
}

/// An owner, cluster or image name, as `validate_name` accepts it: no separators, no `.`/`..`, no control
/// characters, at most 255 bytes.
#[derive(ToSchema)]
#[schema(pattern = r"^(?!\.\.?$)[^/\\\x00-\x1f\x7f-\x9f]{1,255}$")]
pub struct Name(pub String);

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ClusterPath {
    /// Owner of the cluster
    pub owner: Name,
    /// Cluster name
    pub cluster: Name,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct CollectionPath {
    /// Owner of the cluster
    pub owner: Name,
    /// Cluster name
    pub cluster: Name,
    pub kind: ImageKindDoc,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RecordPath {
    /// Owner of the cluster
    pub owner: Name,
    /// Cluster name
    pub cluster: Name,
    pub kind: ImageKindDoc,
    /// image_name
    pub name: Name,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct FilePath {
    /// Owner of the cluster
    pub owner: Name,
    /// Cluster name
    pub cluster: Name,
    pub kind: FileKindDoc,
    /// image_name, or image_name.sha256sum for its checksum line
    pub name: Name,
}

/// The protocol version in the OpenAPI document.
#[derive(ToSchema)]
pub enum TusVersionDoc {
    #[schema(rename = "1.0.0")]
    V1,
}
