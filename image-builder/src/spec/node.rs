//! `components.node`: an image for compute nodes. The agent binary comes along as the node's tool (it writes
//! containerd's mirror configuration), not as a service: the node pulls every image through the appliance's
//! agent, trusting the site CA, and can warm its cache at boot.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inputs::{FileComponent, Input};

/// Where the site CA goes on the node.
pub const SITE_CA: &str = "/etc/foothold/site-ca.pem";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    /// The appliance's agent, which containerd pulls every registry's images through:
    /// `https://172.22.0.1:5000` (its address on the provisioning network).
    pub mirror: String,
    /// The site CA, which signs the agent's certificate: the appliance's `/etc/foothold/tls/ca.pem`.
    /// Required when the mirror is https.
    #[serde(default)]
    pub ca: Option<Input>,
    /// Registries mirrored beside foothold-agent mirror-config's defaults.
    #[serde(default)]
    pub registries: Vec<String>,
    /// Images pulled through the mirror at every boot, before the node reports ready (a warm cache for what the
    /// node runs first); the ready marker names each with its digest.
    #[serde(default)]
    pub prefetch: Vec<String>,
}

impl Node {
    /// The field of the CA.
    pub const CA_FIELD: &str = "components.node.ca";

    /// The CA as a file input placed at [`SITE_CA`].
    pub fn files(&self) -> Option<(String, FileComponent)> {
        let ca = self.ca.as_ref()?;
        Some((
            Self::CA_FIELD.into(),
            ca.to_file(Some(SITE_CA.into()), Some("0644")),
        ))
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        let f = "components.node";
        let Some(rest) = self
            .mirror
            .strip_prefix("https://")
            .or_else(|| self.mirror.strip_prefix("http://"))
        else {
            return Err(format!(
                "{f}.mirror: {:?} is not an http(s) URL like https://172.22.0.1:5000",
                self.mirror
            ));
        };
        if rest.is_empty() || rest.contains(['/', ' ']) {
            return Err(format!(
                "{f}.mirror: {:?} must be scheme://host[:port] only",
                self.mirror
            ));
        }
        if self.mirror.starts_with("https://") && self.ca.is_none() {
            return Err(format!(
                "{f}.ca: required for an https mirror (the appliance's /etc/foothold/tls/ca.pem)"
            ));
        }
        for (i, r) in self.prefetch.iter().enumerate() {
            let tagged = r.contains('@')
                || r.rsplit_once(':')
                    .is_some_and(|(repo, tag)| !repo.is_empty() && !tag.contains('/'));
            if !tagged || !r.split('/').next().unwrap_or_default().contains('.') {
                return Err(format!(
                    "{f}.prefetch[{i}]: {r:?} must be a full name with a registry and a tag or digest, like docker.io/library/busybox:1.35"
                ));
            }
        }
        Ok(())
    }
}
