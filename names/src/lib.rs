//! The names Foothold's parts agree on, in one place for the agent and the image builder: the kinds of BPA
//! image records and the rule for their owner, cluster and image names; and their command lines' shared
//! conventions (`cli`: completion scripts and man pages). The agent serves what the builder
//! writes into its store, so a name one accepts the other must accept too.

#![forbid(unsafe_code)]

pub mod cli;

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The installer image an appliance serves and the BPA's Jobs run by default: the agent binary with the libraries
/// it links against and the appliance's `kubernetes-release.json`, entrypoint `foothold-agent install`. The
/// builder makes it under this name; the agent's `--installer-image` defaults to it. Its registry is no real
/// one: only the appliance's mirror has it.
pub const INSTALLER_IMAGE: &str = "foothold.local/foothold/installer:appliance";
/// Where the installer image holds the release file (`foothold-agent install-cluster --release`'s default).
pub const INSTALLER_RELEASE: &str = "/etc/foothold/release/kubernetes-release.json";
/// The installer's exit status when it failed for a reason another run with the same inputs cannot remove (a
/// refused SSH key, a plan refused, a kubeadm preflight check): the BPA's Jobs fail at once on it rather than
/// run their retries. Any other failure exits 1, which the Jobs retry.
pub const INSTALLER_EXIT_LASTING: u8 = 3;

/// The longest owner, cluster or image name, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// The kind of a BPA image record: the path segment of Akraino ICN's REST API (`binary_images`, `os_images`,
/// `container_images`).
#[derive(
    Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum ImageKind {
    #[serde(rename = "binary_images")]
    Binary,
    #[serde(rename = "os_images")]
    Os,
    #[serde(rename = "container_images")]
    Container,
}

impl ImageKind {
    pub const ALL: [ImageKind; 3] = [ImageKind::Binary, ImageKind::Os, ImageKind::Container];

    pub fn as_str(self) -> &'static str {
        match self {
            ImageKind::Binary => "binary_images",
            ImageKind::Os => "os_images",
            ImageKind::Container => "container_images",
        }
    }

    /// Whether the file server serves it (container images come from the registry).
    pub fn is_file(self) -> bool {
        self != ImageKind::Container
    }
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ImageKind {
    /// Why not, for the caller's error.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ImageKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not binary_images, os_images or container_images"))
    }
}

/// Checks an owner, cluster or image name: one path segment of at most [`MAX_NAME_LEN`] bytes, not `.` or
/// `..`, with no control character. The error is the reason, starting with the name quoted.
pub fn check_name(s: &str) -> Result<(), String> {
    let reason = if s.is_empty() {
        "is empty".to_owned()
    } else if s.len() > MAX_NAME_LEN {
        format!("is longer than {MAX_NAME_LEN} bytes")
    } else if s == "." || s == ".." {
        "is a relative path component".to_owned()
    } else if s.contains(['/', '\\']) {
        "contains a path separator".to_owned()
    } else if s.chars().any(char::is_control) {
        "contains a control character".to_owned()
    } else {
        return Ok(());
    };
    Err(format!("{s:?} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_and_write_their_rest_path_segment() {
        for k in ImageKind::ALL {
            assert_eq!(k.as_str().parse::<ImageKind>(), Ok(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert_eq!(k.to_string(), k.as_str());
        }
        assert!("images"
            .parse::<ImageKind>()
            .unwrap_err()
            .contains("binary_images, os_images"));
        assert!(!ImageKind::Container.is_file() && ImageKind::Os.is_file());
    }

    #[test]
    fn a_name_is_one_path_segment() {
        for good in ["node.img", "ubuntu 22.04.img", "a", &"x".repeat(255), "ü"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "is empty"),
            ("..", "relative"),
            ("a/b", "separator"),
            ("a\\b", "separator"),
            ("a\nb", "control"),
            (&"x".repeat(256), "longer than 255"),
        ] {
            assert!(check_name(bad).unwrap_err().contains(why), "{bad:?}");
        }
    }
}
