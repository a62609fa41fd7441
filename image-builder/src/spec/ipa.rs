//! `components.ipa`: Ironic's deploy ramdisk. ironic-python-agent is Debian's package (trixie's carries the
//! security fixes PyPI's release of the same version lacks), unpacked into the root without its Depends: those
//! pull libguestfs with a whole qemu, git, man-db and the burn-in tools, none of which the agent runs for
//! inspection, cleaning or deploy. What it does run is installed from Debian ([`crate::ipa::PACKAGES`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inputs::{FileComponent, Input};

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
}
