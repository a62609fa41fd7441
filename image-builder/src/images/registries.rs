//! Talking to registries: the client (HTTPS but for the hosts given as insecure), the credentials from the
//! auth file `skopeo login` writes, and what an error adds when a registry wants credentials.

use std::path::PathBuf;

use anyhow::Result;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// Settings for pulling.
#[derive(Debug, Clone, Default)]
pub struct PullSettings {
    /// Registries (`host:port`) spoken to over plain HTTP.
    pub insecure: Vec<String>,
    /// Registry credentials (see `auth`); None: the default auth file, if there is one.
    pub auth_file: Option<PathBuf>,
}

/// Whether an error says the registry wants credentials (or refused the ones given).
fn is_auth_error(e: &anyhow::Error) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    e.chain().any(|c| match c.downcast_ref::<E>() {
        Some(E::AuthenticationFailure(_) | E::UnauthorizedError { .. }) => true,
        Some(E::ServerError { code, .. }) => *code == 401 || *code == 403,
        Some(E::RegistryError { envelope, .. }) => envelope
            .errors
            .iter()
            .any(|o| matches!(o.code, C::Unauthorized | C::Denied)),
        _ => false,
    })
}

/// What talking to registries needs: a runtime, a client and the credentials file.
pub(super) struct Registries {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) client: Client,
    pub(super) auth_file: Option<crate::auth::AuthFile>,
}

impl Registries {
    /// Reads the credentials file: only call this when something is to be pulled.
    pub(super) fn new(settings: &PullSettings) -> Result<Registries> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // oci-client is built without a rustls backend; ring is the one the workspace uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(settings.insecure.clone()),
            connect_timeout: Some(std::time::Duration::from_secs(30)),
            read_timeout: Some(std::time::Duration::from_secs(120)),
            ..ClientConfig::default()
        });
        let auth_file = match settings
            .auth_file
            .clone()
            .or_else(crate::auth::default_path)
        {
            Some(path) => Some(crate::auth::AuthFile::load(&path)?),
            None => None,
        };
        Ok(Registries {
            rt,
            client,
            auth_file,
        })
    }

    /// The credentials for `repo`, and for progress lines who they are (` as <user> (credentials for <key> in
    /// <file>)`, or nothing when anonymous).
    pub(super) fn auth(&self, repo: &Reference) -> (RegistryAuth, String) {
        let found = self
            .auth_file
            .as_ref()
            .and_then(|f| Some((f, f.lookup(repo.registry(), repo.repository())?)));
        match found {
            Some((f, (key, user, password))) => (
                RegistryAuth::Basic(user.to_owned(), password.to_owned()),
                format!(" as {user} (credentials for {key} in {})", f.path.display()),
            ),
            None => (RegistryAuth::Anonymous, String::new()),
        }
    }

    /// What to add to an error from `repo` when the registry wants credentials or refused them.
    pub(super) fn hint(&self, auth: &RegistryAuth, e: &anyhow::Error, repo: &Reference) -> String {
        match (auth, is_auth_error(e), &self.auth_file) {
            (RegistryAuth::Anonymous, true, Some(f)) => format!(
                "; the registry wants credentials and {} has none for {}",
                f.path.display(),
                repo.registry()
            ),
            (RegistryAuth::Anonymous, true, None) => format!(
                "; the registry wants credentials: log in to {} with `skopeo login` or give --authfile",
                repo.registry()
            ),
            (_, true, _) => "; the registry refused the credentials".to_owned(),
            _ => String::new(),
        }
    }
}
