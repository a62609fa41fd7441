//! The OpenAPI 3 document of the BPA REST API, the file server and tus uploads, generated from the handlers'
//! annotations (utoipa) and served at `/openapi.json`. The schemas here exist only to describe the wire
//! format; the handlers' own types carry the rest.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Foothold agent",
        description = "BPA image records and uploads (paths and fields of Akraino ICN's BPA REST agent), the file \
                       server nodes and Ironic download from, and tus 1.0 resumable uploads."
    ),
    paths(
        crate::rest::status,
        crate::rest::list,
        crate::rest::create,
        crate::rest::read,
        crate::rest::update,
        crate::rest::append,
        crate::rest::remove,
        crate::rest::download,
        crate::tus::options,
        crate::tus::create,
        crate::tus::info,
        crate::tus::append,
        crate::tus::terminate,
    ),
    components(schemas(ImageKindDoc, FileKindDoc, TusVersionDoc, Name)),
    modifiers(&Token)
)]
pub struct ApiDoc;

struct Token;

impl Modify for Token {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The agent's write token (--token-file); Basic auth with it as password works too",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document as JSON.
pub fn json() -> String {
    ApiDoc::openapi()
        .to_json()
        .expect("the OpenAPI document serialises")
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

#[derive(ToSchema)]
pub enum TusVersionDoc {
    #[schema(rename = "1.0.0")]
    V1,
}

/// ICN's original client: a form whose `metadata` part is the JSON of NewImage.
#[derive(ToSchema)]
pub struct MultipartMetadata {
    /// NewImage as JSON text.
    pub metadata: String,
}

/// `GET .../status`: a cluster's images by type, and the Kubernetes objects installing it: Provisionings with
/// the `owner` label and this cluster name, and the Softwares labelled with the cluster in their namespaces.
#[derive(ToSchema)]
pub struct ClusterStatus {
    pub owner: String,
    pub cluster: String,
    pub images: StatusImages,
    pub provisioning: Vec<ClusterObject>,
    pub software: Vec<ClusterObject>,
    pub kubernetes: KubeState,
}

/// A Provisioning or Software and its status (as in its CRD).
#[derive(ToSchema)]
pub struct ClusterObject {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub status: Option<serde_json::Value>,
}

/// Whether the installation status could be read: `disabled` (no controllers configured), `ok`, or
/// `unavailable` with the error (the listed objects are then empty).
#[derive(ToSchema)]
pub struct KubeState {
    #[schema(pattern = "^(disabled|ok|unavailable)$")]
    pub state: String,
    pub error: Option<String>,
}

#[derive(ToSchema)]
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
