//! The OpenAPI 3 document of the BPA REST API, the file server and tus uploads, served at `/openapi.json`:
//! only the list of what is in it. The paths come from the handlers' annotations (utoipa), the schemas from
//! the types beside them.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::schema::{FileKindDoc, ImageKindDoc, Name, TusVersionDoc};
use super::{files, rest, tus};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Foothold agent",
        description = "BPA image records and uploads (paths and fields of Akraino ICN's BPA REST agent), the file \
                       server nodes and Ironic download from, and tus 1.0 resumable uploads."
    ),
    paths(
        rest::status,
        rest::list,
        rest::create,
        rest::read,
        rest::update,
        rest::append,
        rest::remove,
        files::download,
        tus::options,
        tus::create,
        tus::info,
        tus::append,
        tus::terminate,
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
                        "A credential's token (--token-file's admin, or one of the credentials file's); Basic auth with it as password works too",
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
