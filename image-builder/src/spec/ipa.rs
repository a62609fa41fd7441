//! `components.ipa`: Ironic's deploy ramdisk. ironic-python-agent is Debian's package (trixie's carries the
//! security fixes PyPI's release of the same version lacks), unpacked into the root without its Depends: those
//! pull libguestfs with a whole qemu, git, man-db and the burn-in tools, none of which the agent runs for
//! inspection, cleaning or deploy. What it does run is installed from Debian ([`crate::ipa::PACKAGES`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inputs::{FileComponent, Input};
use super::{Format, Spec};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ipa {
    /// Debian's `ironic-python-agent` package (the `.deb`), of the series of the appliance's Ironic (trixie:
    /// 10.2.0, Ironic 29.0).
    pub package: Input,
}

impl Ipa {
    pub const FIELD: &'static str = "components.ipa.package";

    /// The package as a file input (unpacked at staging, not placed).
    pub fn files(&self) -> (String, FileComponent) {
        (Self::FIELD.into(), self.package.to_file(None, None))
    }

    pub(super) fn validate(&self, spec: &Spec) -> Result<(), String> {
        let c = &spec.components;
        if c.kubernetes.is_some() || c.node.is_some() || c.metal3.is_some() || c.agent.is_some() {
            return Err(
                "components.ipa: a deploy ramdisk runs ironic-python-agent and nothing of the \
                        site (no agent, kubernetes, metal3 or node); put those in other specs"
                    .into(),
            );
        }
        if spec.outputs.formats != [Format::Ramdisk] {
            return Err("outputs.formats: a deploy ramdisk (components.ipa) is made as [ramdisk]: \
                        Ironic boots its kernel and initramfs by PXE, and makes the virtual-media ISO itself"
                .into());
        }
        if !self.package.file_name().ends_with(".deb") {
            return Err(format!(
                "{}: {:?} is not a Debian package (.deb)",
                Self::FIELD,
                self.package.file_name()
            ));
        }
        Ok(())
    }
}
