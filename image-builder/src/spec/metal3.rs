//! `components.metal3`: Metal3's baremetal-operator, built here from its source archive (the Go module proxy
//! refuses Metal3's modules), and Ironic from the base suite's Debian packages. Both run as systemd units beside
//! the control plane; what they need of the image (packages, configuration, units) is in [`crate::metal3`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inputs::{FileComponent, Input};
use crate::source::{ArchiveRecipe, ArchiveSource};

/// Where BMO's manager is installed.
pub const BMO_BIN: &str = "/usr/local/bin/baremetal-operator";
/// Where BMO looks for its Ironic provisioner plugin (`PROVISIONER_PLUGIN_DIR`).
pub const BMO_PLUGIN_DIR: &str = "/usr/local/lib/metal3/plugins";
/// The plugin's file name, which BMO's `main.go` expects.
pub const BMO_PLUGIN: &str = "ironic-provisioner.so";
/// BMO's Ironic provisioner, the package built as a Go plugin.
pub const BMO_PLUGIN_PACKAGE: &str = "./pkg/provisioner/ironic/plugin";
/// Where BMO's CRDs sit in its source tree.
pub const BMO_CRDS: &str = "config/base/crds/bases";
/// Where BMO's source keeps its RBAC (`role.yaml`: the ClusterRole its controllers need).
pub const BMO_RBAC: &str = "config/base/rbac";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metal3 {
    pub baremetal_operator: BaremetalOperator,
    /// Ironic's deploy ramdisk (`foothold-build build packages/ipa.yaml`): the agent Ironic boots on a node to
    /// inspect it, clean its disks and write an image to them. Without it, only live ISOs are deployed, with
    /// inspection and cleaning disabled on every BareMetalHost.
    #[serde(default)]
    pub deploy_ramdisk: Option<DeployRamdisk>,
}

/// Where the deploy ramdisk is placed in the image: Ironic reads it by `file://` URL from there.
pub const DEPLOY_RAMDISK_DIR: &str = "/usr/share/foothold/ironic-deploy";

/// The two files of a ramdisk made with `outputs.formats: [ramdisk]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeployRamdisk {
    /// `<name>.kernel`.
    pub kernel: Input,
    /// `<name>.initramfs`.
    pub initramfs: Input,
    /// `<name>.esp`, the EFI system partition of the virtual-media ISOs Ironic makes of the two. Without it,
    /// UEFI hosts with a `redfish-virtualmedia` BMC cannot boot the ramdisk (iPXE ones can).
    #[serde(default)]
    pub esp: Option<Input>,
}

impl DeployRamdisk {
    /// The kernel, the initramfs and the ESP as placed file inputs, by spec field.
    pub fn files(&self) -> Vec<(String, FileComponent)> {
        let f = "components.metal3.deployRamdisk";
        [
            ("kernel", Some(&self.kernel)),
            ("initramfs", Some(&self.initramfs)),
            ("esp", self.esp.as_ref()),
        ]
        .into_iter()
        .filter_map(|(name, input)| {
            Some((
                format!("{f}.{name}"),
                input?.to_file(Some(format!("{DEPLOY_RAMDISK_DIR}/{name}")), Some("0644")),
            ))
        })
        .collect()
    }
}

/// baremetal-operator: its manager and its Ironic provisioner plugin, built with cgo by one toolchain from one
/// source tree (a plugin built otherwise does not load), and its CRDs, applied at every boot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaremetalOperator {
    /// The source archive of `github.com/metal3-io/baremetal-operator` (a `.tar.gz` of the tree; `path` or
    /// `url`), pinned by sha256.
    pub source: Input,
    /// Archives of Go modules the module proxy does not serve, used in their place (`go mod edit -replace`),
    /// e.g. `github.com/metal3-io/ironic-standalone-operator/api`.
    #[serde(default)]
    pub replace: Vec<Replacement>,
    /// Unified diffs (`-p1`, relative to the module's root) applied in order to the source before it is built
    /// and its CRDs are read, each pinned like the source: changes carried on top of upstream.
    #[serde(default)]
    pub patches: Vec<Input>,
    /// The sha256 of the manager built from the source (`foothold-build pin` builds it and fills it in).
    #[serde(default)]
    pub manager: Built,
    /// The sha256 of the Ironic provisioner plugin built from the source.
    #[serde(default)]
    pub plugin: Built,
}

/// A module replaced by a source archive holding it (its `go.mod` is found inside).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Replacement {
    pub module: String,
    pub source: Input,
}

/// The pin of something built here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Built {
    #[serde(default)]
    pub sha256: Option<String>,
}

const FIELD: &str = "components.metal3.baremetalOperator";

impl BaremetalOperator {
    /// The source archives, by spec field: inputs fetched and checked like any other, placed nowhere.
    pub fn archives(&self) -> Vec<(String, FileComponent)> {
        let mut out = vec![(format!("{FIELD}.source"), self.source.to_file(None, None))];
        for (i, r) in self.replace.iter().enumerate() {
            out.push((
                format!("{FIELD}.replace[{i}].source"),
                r.source.to_file(None, None),
            ));
        }
        for (i, p) in self.patches.iter().enumerate() {
            out.push((format!("{FIELD}.patches[{i}]"), p.to_file(None, None)));
        }
        out
    }

    /// The manager and the plugin as file inputs built from the archives, by spec field.
    pub fn binaries(&self) -> [(String, FileComponent); 2] {
        let recipe = |package: &str, plugin: bool| ArchiveRecipe {
            source: source(&self.source),
            replace: self
                .replace
                .iter()
                .map(|r| (r.module.clone(), source(&r.source)))
                .collect(),
            patches: self.patches.iter().map(source).collect(),
            package: package.to_owned(),
            plugin,
        };
        let file = |built: &Built, dest: String, mode: &str, recipe: ArchiveRecipe| FileComponent {
            sha256: built.sha256.clone(),
            dest: Some(dest),
            mode: Some(mode.to_owned()),
            archive: Some(recipe),
            ..FileComponent::default()
        };
        [
            (
                format!("{FIELD}.manager"),
                file(&self.manager, BMO_BIN.into(), "0755", recipe(".", false)),
            ),
            (
                format!("{FIELD}.plugin"),
                file(
                    &self.plugin,
                    format!("{BMO_PLUGIN_DIR}/{BMO_PLUGIN}"),
                    "0644",
                    recipe(BMO_PLUGIN_PACKAGE, true),
                ),
            ),
        ]
    }

    /// Every input, to rewrite (the bundle makes local paths its own).
    pub fn inputs_mut(&mut self) -> impl Iterator<Item = &mut Input> {
        std::iter::once(&mut self.source)
            .chain(self.replace.iter_mut().map(|r| &mut r.source))
            .chain(self.patches.iter_mut())
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        for (field, f) in self.archives() {
            if f.go.is_some() || f.cc.is_some() {
                return Err(format!(
                    "{field}: a source archive or patch is a path or a url, not built itself"
                ));
            }
            if f.sha256.is_none() {
                return Err(format!(
                    "{field}.sha256: required (a source archive or patch is pinned, wherever it is)"
                ));
            }
        }
        for (i, r) in self.replace.iter().enumerate() {
            crate::source::parse_reference(&format!("{}@v0.0.0", r.module))
                .map_err(|e| format!("{FIELD}.replace[{i}].module: {e}"))?;
        }
        Ok(())
    }
}

/// Where an archive comes from: its path as the spec says it (resolved at build), or its pin (a URL input is
/// fetched into the cache under it).
fn source(i: &Input) -> ArchiveSource {
    ArchiveSource {
        path: i.path.clone(),
        sha256: i.sha256.clone().unwrap_or_default(),
        name: i.file_name(),
    }
}
