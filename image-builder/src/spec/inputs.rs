//! The inputs of a spec: a file from a URL, a local path or built here from source, and where it goes. A leaf
//! of `spec`: its components (Kubernetes, Metal3) are made of these.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One input: a URL pinned by sha256, a local path (relative to the spec), or built here from source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Input {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A Go package to build, `<import path>@<module version>` (`github.com/coredns/coredns@v1.13.1`).
    #[serde(default)]
    pub go: Option<String>,
    /// A C file of a Go module to compile statically, `<module path>/<file>@<version>`.
    #[serde(default)]
    pub cc: Option<String>,
    /// Hex sha256 of the content; required for `url`, `go` and `cc` (`foothold-build pin` fills it in).
    #[serde(default)]
    pub sha256: Option<String>,
}

impl Input {
    /// The input's file name (of the URL's last path segment, the path, or the package's last element).
    pub(crate) fn file_name(&self) -> String {
        let from_url = self.url.as_deref().and_then(|u| {
            let path = u.split(['?', '#']).next().unwrap_or(u);
            path.rsplit('/').next().filter(|s| !s.is_empty())
        });
        let from_path = self
            .path
            .as_deref()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned());
        let from_source = self
            .go
            .as_deref()
            .or(self.cc.as_deref())
            .and_then(|r| r.split('@').next()?.rsplit('/').next())
            .map(str::to_owned);
        from_url
            .map(str::to_owned)
            .or(from_path)
            .or(from_source)
            .unwrap_or_else(|| "input".into())
            .replace('%', "_")
    }

    pub(crate) fn to_file(&self, dest: Option<String>, mode: Option<&str>) -> FileComponent {
        FileComponent {
            url: self.url.clone(),
            path: self.path.clone(),
            go: self.go.clone(),
            cc: self.cc.clone(),
            sha256: self.sha256.clone(),
            dest,
            serve: None,
            mode: mode.map(str::to_owned),
            archive: None,
        }
    }
}

/// A file from a URL (pinned by sha256) or a local path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileComponent {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A Go package to build, `<import path>@<module version>`.
    #[serde(default)]
    pub go: Option<String>,
    /// A C file of a Go module to compile statically, `<module path>/<file>@<version>`.
    #[serde(default)]
    pub cc: Option<String>,
    /// Hex sha256 of the content; required for `url`, `go` and `cc`.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Where it goes in the root file system (absolute path).
    #[serde(default)]
    pub dest: Option<String>,
    /// Serve it from the agent's store at `/files/<owner>/<cluster>/<kind>/<name>` from first boot.
    #[serde(default)]
    pub serve: Option<Serve>,
    /// Octal mode, default `0644`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Built from a source archive (baremetal-operator's binaries); never written in a spec.
    #[serde(skip)]
    #[schemars(skip)]
    pub archive: Option<crate::source::ArchiveRecipe>,
}

/// A file the agent serves: a completed BPA image record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Serve {
    #[serde(default = "default_owner")]
    pub owner: String,
    #[serde(default = "default_cluster")]
    pub cluster: String,
    pub kind: ServeKind,
    pub name: String,
}

impl Serve {
    /// Its path on the agent: `/files/<owner>/<cluster>/<kind>/<name>`.
    pub fn path(&self) -> String {
        format!(
            "/files/{}/{}/{}/{}",
            self.owner,
            self.cluster,
            self.kind.as_str(),
            self.name
        )
    }
}

fn default_owner() -> String {
    "foothold".into()
}

fn default_cluster() -> String {
    "site".into()
}

/// `binary_images` or `os_images` (one type with the agent's records; container images go in `images`).
pub use foothold_names::ImageKind as ServeKind;

impl FileComponent {
    /// The spec key and reference of an input built from source: `("go", "…@v1")`, `("cc", "…@v1")`, or
    /// `("sha256", "<archive>:<package>")` for one built from a source archive (its field is only the pin).
    pub fn source_ref(&self) -> Option<(&'static str, String)> {
        self.recipe().map(|r| {
            let key = match r {
                crate::source::Recipe::Go(_) => "go",
                crate::source::Recipe::Cc(_) => "cc",
                crate::source::Recipe::Archive(_) => "sha256",
            };
            (key, r.reference())
        })
    }

    /// How to build this input here, if it is built from source.
    pub fn recipe(&self) -> Option<crate::source::Recipe> {
        use crate::source::Recipe;
        (self.go.clone().map(Recipe::Go))
            .or_else(|| self.cc.clone().map(Recipe::Cc))
            .or_else(|| self.archive.clone().map(Recipe::Archive))
    }
}
