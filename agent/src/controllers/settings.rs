//! What the controllers are told on the command line: which to run, where to watch, who they are in the
//! leader Lease, and what the objects they make run.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bpa,
    Sip,
    Vino,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Bpa, Kind::Sip, Kind::Vino];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Bpa => "bpa",
            Kind::Sip => "sip",
            Kind::Vino => "vino",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// A kubeconfig file; None: `KUBECONFIG`, `~/.kube/config`, then the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub controllers: Vec<Kind>,
    /// Watch one namespace; None: all.
    pub namespace: Option<String>,
    /// This agent's name in the Lease.
    pub identity: String,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    /// The image BPA installer Jobs run.
    pub installer_image: String,
    /// Who the installer Jobs log in to the hosts as (their `INSTALLER_SSH_USER`).
    pub installer_ssh_user: String,
    /// The installer Jobs' `DRAIN_TIMEOUT_SECONDS`: how long a leaving host's drain may wait.
    pub drain_timeout_seconds: u64,
    /// Default image of the `vino-builder` container in ViNO DaemonSets (a Vino may name its own).
    pub vino_builder_image: String,
    /// The Secret (in the Provisioning's namespace) with the SSH key installers use (`id_rsa`).
    pub ssh_key_secret: String,
    /// The site SSH CA's public key (one line): the installer Jobs' `SSH_HOST_CA`, which hosts' certificates
    /// must be signed by. None: the Jobs take host keys on first use.
    pub ssh_host_ca: Option<String>,
    /// The Secret (in the Provisioning's namespace, key `token`) with the read token installer Jobs write to the
    /// hosts they prepare. None: they write none.
    pub node_read_token_secret: Option<String>,
    /// Approve kubelets' serving certificate requests that are their own (`kubelet_serving`).
    pub approve_kubelet_serving: bool,
    /// The agent's URL as nodes reach it (`http://10.0.0.1:5000`): package downloads point there.
    pub advertise_url: Option<String>,
    /// Where the API server asks the agent whether a BPA host may go (`bpa::webhook`); None: no hold.
    pub admission: Option<Admission>,
}

/// Where the API server reaches the agent and the certificates it trusts there (`--admission-url`,
/// `--admission-ca`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// `https://host:port`, without a path.
    pub url: String,
    /// PEM: the CA that signed the agent's serving certificate.
    pub ca_pem: String,
}

impl Settings {
    /// These settings with the installer image by the digest this agent's store holds for its tag (see
    /// [`pinned`]).
    pub async fn pinned(&self, store: &crate::store::Store) -> Settings {
        let installer_image = pinned(store, &self.installer_image).await;
        if installer_image != self.installer_image {
            tracing::info!(image = %installer_image, "installer Jobs run the image by its digest");
        }
        Settings {
            installer_image,
            ..self.clone()
        }
    }
}

/// `reference` as `repo@<digest>` with the digest the agent's own store holds for its tag: the Jobs run the
/// image the appliance serves now, and a tag moved while one runs (only an admin credential can: the
/// appliance's images are protected) changes nothing under it. Unchanged when it names a digest already, or
/// the store does not hold it (an image pulled from elsewhere).
pub async fn pinned(store: &crate::store::Store, reference: &str) -> String {
    if reference.contains('@') {
        return reference.to_owned();
    }
    let Ok((repo, tag)) = crate::names::normalize_reference(reference) else {
        return reference.to_owned();
    };
    let tag = crate::store::Reference::Tag(tag.unwrap_or_else(|| "latest".into()));
    match store.resolve(&repo, &tag).await {
        Ok(row) => format!(
            "{}@{}",
            crate::names::split_reference(reference).0,
            row.digest
        ),
        Err(_) => reference.to_owned(),
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a controller: bpa, sip or vino"))
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[tokio::test]
    async fn the_installer_image_is_pinned_to_the_digest_the_store_holds_for_its_tag() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("data")).unwrap();
        // A one-layer image in an OCI layout, imported as the builder imports the installer's.
        let layout = dir.path().join("layout");
        let blobs = layout.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let blob = |bytes: &[u8]| {
            let d = crate::digest::Digest::of_bytes(bytes);
            std::fs::write(blobs.join(d.hex()), bytes).unwrap();
            (d.to_string(), bytes.len())
        };
        let (config, config_len) = blob(
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
        );
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config}","size":{config_len}}},"layers":[]}}"#
        );
        let (digest, len) = blob(manifest.as_bytes());
        std::fs::write(
            layout.join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .unwrap();
        std::fs::write(
            layout.join("index.json"),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{digest}","size":{len},"annotations":{{"org.opencontainers.image.ref.name":"foothold.local/foothold/installer:appliance"}}}}]}}"#
            ),
        )
        .unwrap();
        crate::import::import_layout(&store, &layout, None, crate::import::Children::All).unwrap();

        let pinned = |r: &'static str| super::pinned(&store, r);
        assert_eq!(
            pinned("foothold.local/foothold/installer:appliance").await,
            format!("foothold.local/foothold/installer@{digest}")
        );
        // Another tag, another image, a digest already: as they were.
        for r in [
            "foothold.local/foothold/installer:other",
            "quay.io/x/installer:1",
            "installer",
            "foothold.local/foothold/installer@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(pinned(r).await, r);
        }
    }

    #[test]
    fn kinds_parse_from_their_names() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        }
        assert!("ironic"
            .parse::<Kind>()
            .unwrap_err()
            .contains("bpa, sip or vino"));
    }
}
