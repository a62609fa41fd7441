//! What the phases share: the settings a build runs with, the spec and layout every phase reads ([`Build`]),
//! and what the phases note for the manifests ([`Record`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::layout::Layout;
use crate::progress::Progress;
use crate::spec::{Format, Loaded};

/// Where things go and come from.
pub struct Settings {
    pub out: PathBuf,
    pub cache: PathBuf,
    /// Overrides the spec's agent binary.
    pub agent: Option<PathBuf>,
    /// Seconds since the epoch for every timestamp in the image.
    pub source_date_epoch: u64,
    /// Build only these of the spec's formats (None: all of them).
    pub formats: Option<Vec<Format>>,
    /// Never use the network: everything must be in the cache (or the bundle).
    pub offline: bool,
    /// How container images are pulled.
    pub pull: crate::images::PullSettings,
}

/// What every phase reads: the spec, the settings, the disk's layout and the staging directory.
pub struct Build<'a> {
    pub loaded: &'a Loaded,
    pub settings: &'a Settings,
    pub progress: &'a Progress,
    pub layout: Layout,
    /// Scratch space, removed when the build ends.
    pub work: PathBuf,
}

/// What the phases note for the outputs' manifests: the inputs they used and the tools they ran.
#[derive(Default)]
pub struct Record {
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub tools: BTreeMap<&'static str, String>,
}
