//! The appliance spec (`packages/*.yaml`): what goes into an image, every remote input pinned by sha256.
//! `load` reports problems with the file, line and field; `schema` is the JSON Schema of the format.

mod agent_args;
mod inputs;
mod ipa;
mod metal3;
mod node;
mod validate;
pub mod version;

pub use agent_args::{agent_flags, AGENT_CONFIG};
pub use inputs::{FileComponent, Input, Serve, ServeKind};
pub use ipa::Ipa;
pub use node::{Node, SITE_CA};

pub use metal3::{
    BaremetalOperator, Built, DeployRamdisk, Metal3, Replacement, BMO_BIN, BMO_CRDS, BMO_PLUGIN,
    BMO_PLUGIN_DIR, BMO_RBAC, DEPLOY_RAMDISK_DIR,
};

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// The spec format's version: `foothold.io/v1alpha1`. Without it (a spec older than the field) the spec is
    /// read as that version, with a warning; `foothold-build migrate` writes it in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<version::ApiVersion>,
    /// What the file describes: `Image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<version::Kind>,
    /// Output files are `<name>.raw`, `<name>.qcow2`, `<name>.iso`.
    pub name: String,
    pub base: Base,
    /// The appliance's host name.
    pub hostname: String,
    #[serde(default)]
    pub users: Vec<User>,
    #[serde(default)]
    pub network: Network,
    #[serde(default)]
    pub components: Components,
    pub outputs: Outputs,
}

/// The Debian base system, built by mmdebstrap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Base {
    /// Debian suite, e.g. `bookworm`.
    pub suite: String,
    /// Debian mirror URL.
    #[serde(default = "default_mirror")]
    pub mirror: String,
    /// Packages beyond the boot essentials (kernel, systemd, udev, e2fsprogs, iproute2, curl).
    #[serde(default)]
    pub packages: Vec<String>,
}

fn default_mirror() -> String {
    "http://deb.debian.org/debian".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct User {
    pub name: String,
    #[serde(default)]
    pub authorized_keys: Vec<String>,
    /// Member of `sudo`, without a password (users log in with keys only; the image has sudo).
    #[serde(default)]
    pub sudo: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    /// The interface facing the compute nodes, with a static address.
    #[serde(default)]
    pub provisioning: Option<StaticInterface>,
    /// The interface to the outside, configured by DHCP. Default: every other `en*` interface.
    #[serde(default)]
    pub external: Option<DhcpInterface>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticInterface {
    /// Interface name (`ens4`) or a MAC address (`52:54:00:12:34:56`).
    pub interface: String,
    /// Address with prefix length, e.g. `172.22.0.1/24` or `fd00:22::1/64`.
    pub address: String,
    /// DHCP and PXE/iPXE boot for the compute nodes on this network, served by the appliance (dnsmasq).
    #[serde(default)]
    pub dhcp: Option<Dhcp>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dhcp {
    /// The addresses leased, `first-last` (IPv4), inside the interface's subnet, without the appliance's own.
    pub range: String,
    /// How long a lease lasts, in dnsmasq's terms: seconds, or a number with `m` or `h`. Default `1h`.
    #[serde(default)]
    pub lease_time: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DhcpInterface {
    /// Interface name or MAC address.
    pub interface: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Components {
    /// The foothold-agent binary to install (a local path, relative to the spec's directory).
    #[serde(default)]
    pub agent: Option<LocalFile>,
    /// Serve the agent over HTTPS with the key and certificate made at first boot (default: plain HTTP).
    #[serde(default)]
    pub agent_tls: bool,
    /// The site CA's certificate (PEM), when the CA is made before the appliance, so that node images can be
    /// built first: placed at `/etc/foothold/tls/ca.pem` instead of a CA made at first boot. Its key is never
    /// in the image: the appliance takes it at boot from a file system labelled `FOOTHOLD-CA` holding
    /// `ca-key.pem` (e.g. a USB stick, removed afterwards). Needs `agentTls`.
    #[serde(default)]
    pub site_ca: Option<Input>,
    /// Extra flags for `foothold-agent serve` (`--name value`, `--name=value` or `--name`), written with
    /// Foothold's own into the agent's configuration file; a flag given twice is a list there, as on a command
    /// line.
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// Files placed into the image.
    #[serde(default)]
    pub files: Vec<FileComponent>,
    /// A directory of files laid over the root file system, after Foothold's own (the units and scripts of
    /// `rootfs/`, built into foothold-build) and before the generated configuration.
    #[serde(default)]
    pub overlay: Option<PathBuf>,
    /// OCI image layouts (local directories) whose images the agent serves from first boot.
    #[serde(default)]
    pub image_layouts: Vec<LocalFile>,
    /// Container images pulled from registries, pinned by digest, served by the agent under their names.
    #[serde(default)]
    pub images: Vec<ImageComponent>,
    /// A single-node Kubernetes, brought up at first boot with its images pulled through the agent.
    #[serde(default)]
    pub kubernetes: Option<Kubernetes>,
    /// Kubernetes manifests applied at every boot once the apiserver answers (server-side apply), in order;
    /// needs `kubernetes`.
    #[serde(default)]
    pub manifests: Vec<Input>,
    /// Metal3 (baremetal-operator and Ironic), as systemd units beside the control plane; needs `kubernetes`.
    #[serde(default)]
    pub metal3: Option<Metal3>,
    /// A compute node's image: containerd pulling through the appliance's agent; the agent is a tool here, not
    /// a service.
    #[serde(default)]
    pub node: Option<Node>,
    /// Ironic's deploy ramdisk (ironic-python-agent), made as `outputs.formats: [ramdisk]`.
    #[serde(default)]
    pub ipa: Option<Ipa>,
}

/// Kubernetes: the node and control-plane binaries of one release, and the images the cluster itself runs. Each
/// binary is an input like any other: built here from its Go module (`go: k8s.io/kubernetes/cmd/kubelet@v1.35.4`,
/// which needs the Go toolchain at fetch time) or upstream's release binary (`url:`), pinned by sha256 either way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kubernetes {
    /// The release, e.g. `v1.35.4`; every binary built from `k8s.io/kubernetes` must be of it.
    pub version: String,
    pub kubelet: Input,
    pub kube_apiserver: Input,
    pub kube_controller_manager: Input,
    pub kube_scheduler: Input,
    pub kube_proxy: Input,
    pub kubectl: Input,
    /// Makes the cluster's certificates and kubeconfigs at first boot (`kubeadm init phase certs|kubeconfig`).
    pub kubeadm: Input,
    /// The sandbox image every pod starts with, e.g. `registry.k8s.io/pause:3.10.1` from
    /// `cc: k8s.io/kubernetes/build/pause/linux/pause.c@v1.35.4`.
    pub pause: BuiltImage,
    /// Cluster DNS, e.g. `registry.k8s.io/coredns/coredns:v1.13.1` from
    /// `go: github.com/coredns/coredns@v1.13.1`.
    pub coredns: BuiltImage,
    /// etcd for the workload clusters the BPA's installer makes with kubeadm (their control planes run it as
    /// a static pod, by the image kubeadm of `version` names), e.g. `registry.k8s.io/etcd:3.6.6-0` from
    /// `go: go.etcd.io/etcd/server/v3@v3.6.6`. The appliance's own etcd is Debian's package. Without it the
    /// appliance cannot install workload clusters.
    #[serde(default)]
    pub etcd: Option<BuiltImage>,
    /// Pod addresses (default `10.244.0.0/16`; this node uses its first /24).
    #[serde(default = "default_pod_subnet")]
    pub pod_subnet: String,
    /// Service addresses (default `10.96.0.0/12`; the apiserver is its first, DNS its tenth).
    #[serde(default = "default_service_subnet")]
    pub service_subnet: String,
    /// The node's address (default `100.127.255.1`), on a dummy interface of its own so that the cluster comes
    /// up whatever the appliance's NICs and cables; reachable on the appliance only. Choose another if the site
    /// uses it.
    #[serde(default = "default_node_address")]
    pub node_address: String,
}

fn default_node_address() -> String {
    "100.127.255.1".into()
}

fn default_pod_subnet() -> String {
    "10.244.0.0/16".into()
}

fn default_service_subnet() -> String {
    "10.96.0.0/12".into()
}

/// A container image made here from one static binary: a single layer with the binary as its entrypoint, served
/// by the agent under `reference`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BuiltImage {
    /// The name it is pulled by, with a tag: `registry.k8s.io/pause:3.10.1`.
    pub reference: String,
    pub binary: Input,
}

/// The binaries (by field) a workload cluster's hosts install, which the agent serves.
pub const WORKLOAD_BINARIES: &[&str] = &["kubelet", "kubeProxy", "kubectl", "kubeadm"];

/// Where Kubernetes' binaries are installed, and the built images' binaries inside their images.
pub const KUBE_BIN_DIR: &str = "/usr/local/bin";
/// Where `components.siteCa` goes: the appliance's site CA certificate, beside the key it takes at boot.
pub const APPLIANCE_SITE_CA: &str = "/etc/foothold/tls/ca.pem";
/// The field of `components.siteCa`.
pub const SITE_CA_FIELD: &str = "components.siteCa";
/// Where the image's manifests are kept for the bring-up to apply.
pub const KUBE_MANIFESTS_DIR: &str = "/usr/local/share/foothold/manifests";

/// A container image by reference and digest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageComponent {
    /// The name compute nodes pull, e.g. `quay.io/metal3-io/ironic:v26.0.1` (the agent serves it under it).
    pub reference: String,
    /// `sha256:<hex>` of the manifest or index the reference resolves to. Required to build or fetch;
    /// `foothold-build pin` resolves the reference's tag and fills it in.
    #[serde(default)]
    pub digest: Option<String>,
    /// Where to pull it from when not the reference's own registry (a mirror), e.g.
    /// `mirror.example:5000/metal3-io/ironic`.
    #[serde(default)]
    pub source: Option<String>,
    /// The platforms kept from a multi-platform index (`os/arch` or `os/arch/variant`); the index itself is kept
    /// whole so its digest resolves. Default `linux/amd64`.
    #[serde(default = "default_platforms")]
    pub platforms: Vec<String>,
}

impl ImageComponent {
    /// The pinned digest; a spec loaded with `Pins::Required` has one for every image.
    pub fn pinned(&self) -> &str {
        self.digest
            .as_deref()
            .expect("a spec loaded for a build or fetch pins every image")
    }
}

fn default_platforms() -> Vec<String> {
    vec!["linux/amd64".into()]
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalFile {
    pub path: PathBuf,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Raw,
    Qcow2,
    Iso,
    /// `<name>.kernel` and `<name>.initramfs`, the whole root in the initramfs (booted by PXE, runs in memory),
    /// and `<name>.esp`, the EFI system partition for a virtual-media ISO of the two; made alone, with no disk.
    Ramdisk,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Outputs {
    pub formats: Vec<Format>,
    /// The raw image's size: `4GiB`, `2048MiB`.
    pub disk_size: String,
    /// Size of the data partition (the agent's store), default `1GiB`.
    #[serde(default)]
    pub data_size: Option<String>,
    /// What boots the disk images (raw, qcow2): `grub` (default; BIOS and UEFI) or `systemd-boot` (UEFI only:
    /// no BIOS boot partition, the kernel and initrd on a larger ESP). The ISO always boots with GRUB.
    #[serde(default)]
    pub bootloader: Bootloader,
    /// For shipping: `none` (default), `zstd` or `xz`. The raw image is also written compressed
    /// (`<name>.raw.zst`, `<name>.raw.xz`) and the qcow2's clusters are compressed (zstd, or zlib for `xz`).
    /// The ISO's squashfs is zstd-compressed either way.
    #[serde(default)]
    pub compression: Compression,
    /// How hard the raw image is compressed: zstd 1–19 (default 10), xz 0–9 (default 6); lower is faster and
    /// larger. Only with `compression`; the qcow2's clusters take their codec's own level.
    #[serde(default)]
    pub compression_level: Option<u8>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Zstd,
    Xz,
}

impl Compression {
    /// Its name in a spec.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }

    /// The levels the compressor takes and its default one; `None` for no compression.
    pub fn levels(self) -> Option<(std::ops::RangeInclusive<u8>, u8)> {
        match self {
            Compression::None => None,
            Compression::Zstd => Some((1..=19, 10)),
            Compression::Xz => Some((0..=9, 6)),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Bootloader {
    #[default]
    Grub,
    SystemdBoot,
}

/// A problem in a spec, naming the file and, where known, the line and field.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SpecError {
    pub file: String,
    pub message: String,
}

/// `sha256:` and 64 lower-case hex digits, or `sha512:` and 128.
pub fn is_digest(s: &str) -> bool {
    let hex = |h: &str, len: usize| {
        h.len() == len
            && h.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    match s.split_once(':') {
        Some(("sha256", h)) => hex(h, 64),
        Some(("sha512", h)) => hex(h, 128),
        _ => false,
    }
}

/// Parses a size like `4GiB`, `512MiB`, `1024KiB` or a byte count.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 4GiB"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        u => {
            return Err(format!(
                "{s:?}: unit {u:?} is not one of B, KiB, MiB, GiB, TiB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Whether a spec must carry every pin (to build or fetch) or may lack some (to be pinned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pins {
    Required,
    Optional,
}

impl Spec {
    /// Every file the image gets, named by its spec field: `files`, then Kubernetes' binaries, then the
    /// manifests (placed where the bring-up applies them, numbered to keep their order).
    pub fn file_inputs(&self) -> Vec<(String, FileComponent)> {
        let c = &self.components;
        let mut out: Vec<(String, FileComponent)> = c
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("components.files[{i}]"), f.clone()))
            .collect();
        if let Some(k) = &c.kubernetes {
            for (name, i) in k.binaries() {
                let mut f = i.to_file(
                    Some(format!("{KUBE_BIN_DIR}/{}", kebab(name))),
                    Some("0755"),
                );
                // What a workload cluster's hosts install: served for the BPA's installer.
                if WORKLOAD_BINARIES.contains(&name) {
                    f.serve = Some(k.served(name));
                }
                out.push((format!("components.kubernetes.{name}"), f));
            }
        }
        if let Some(m) = &c.metal3 {
            out.extend(m.baremetal_operator.binaries());
            out.extend(m.deploy_ramdisk.iter().flat_map(DeployRamdisk::files));
        }
        out.extend(c.node.as_ref().and_then(Node::files));
        if let Some(ca) = &c.site_ca {
            out.push((
                SITE_CA_FIELD.into(),
                ca.to_file(Some(APPLIANCE_SITE_CA.into()), Some("0644")),
            ));
        }
        for (i, m) in c.manifests.iter().enumerate() {
            out.push((
                format!("components.manifests[{i}]"),
                m.to_file(
                    Some(format!("{KUBE_MANIFESTS_DIR}/{i:02}-{}", m.file_name())),
                    Some("0600"),
                ),
            ));
        }
        out
    }

    /// The binaries the builder makes images of (`components.kubernetes.pause.binary`, …), named by field.
    pub fn image_binaries(&self) -> Vec<(String, &Input)> {
        self.components
            .kubernetes
            .iter()
            .flat_map(|k| {
                [
                    ("pause", Some(&k.pause)),
                    ("coredns", Some(&k.coredns)),
                    ("etcd", k.etcd.as_ref()),
                ]
            })
            .filter_map(|(name, im)| {
                Some((format!("components.kubernetes.{name}.binary"), &im?.binary))
            })
            .collect()
    }

    /// Every input to fetch (placed files, image binaries and source archives), named by field.
    pub fn sources(&self) -> Vec<(String, FileComponent)> {
        let mut out = self.file_inputs();
        out.extend(self.components.ipa.as_ref().map(Ipa::files));
        if let Some(m) = &self.components.metal3 {
            out.extend(m.baremetal_operator.archives());
        }
        out.extend(
            self.image_binaries()
                .into_iter()
                .map(|(field, i)| (field, i.to_file(None, None))),
        );
        out
    }

    pub fn data_size(&self) -> Result<u64, String> {
        match &self.outputs.data_size {
            None => Ok(1 << 30),
            Some(s) => {
                let v = parse_size(s).map_err(|e| format!("outputs.dataSize: {e}"))?;
                if v < (16 << 20) || v % (1 << 20) != 0 {
                    return Err(format!(
                        "outputs.dataSize: {s} must be whole MiB and at least 16MiB"
                    ));
                }
                Ok(v)
            }
        }
    }

    pub fn disk_size(&self) -> u64 {
        parse_size(&self.outputs.disk_size).expect("validated")
    }

    /// The level the raw image is compressed at: the spec's, else the compressor's default; `None` when it is
    /// not compressed.
    pub fn compression_level(&self) -> Option<u8> {
        let (_, default) = self.outputs.compression.levels()?;
        Some(self.outputs.compression_level.unwrap_or(default))
    }
}

/// `kubeApiserver` → `kube-apiserver`.
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

impl Kubernetes {
    /// Every input of the component, to rewrite (the bundle makes local paths its own).
    pub fn inputs_mut(&mut self) -> impl Iterator<Item = &mut Input> {
        [
            &mut self.kubelet,
            &mut self.kube_apiserver,
            &mut self.kube_controller_manager,
            &mut self.kube_scheduler,
            &mut self.kube_proxy,
            &mut self.kubectl,
            &mut self.kubeadm,
            &mut self.pause.binary,
            &mut self.coredns.binary,
        ]
        .into_iter()
        .chain(self.etcd.as_mut().map(|e| &mut e.binary))
    }

    /// Where the agent serves `name` for workload clusters (a [`WORKLOAD_BINARIES`] field name, or the release
    /// file's): `/files/foothold/kubernetes-<version>/binary_images/<kebab name>`.
    pub fn served(&self, name: &str) -> Serve {
        Serve {
            owner: "foothold".into(),
            cluster: format!("kubernetes-{}", self.version),
            kind: ServeKind::Binary,
            name: kebab(name),
        }
    }

    /// The binaries installed on the node, by spec field name.
    pub fn binaries(&self) -> [(&'static str, &Input); 7] {
        [
            ("kubelet", &self.kubelet),
            ("kubeApiserver", &self.kube_apiserver),
            ("kubeControllerManager", &self.kube_controller_manager),
            ("kubeScheduler", &self.kube_scheduler),
            ("kubeProxy", &self.kube_proxy),
            ("kubectl", &self.kubectl),
            ("kubeadm", &self.kubeadm),
        ]
    }
}

/// A loaded spec: the parsed value, its directory (relative paths start there) and the hash of its text.
pub struct Loaded {
    pub spec: Spec,
    pub path: PathBuf,
    pub dir: PathBuf,
    pub sha256: String,
    /// What the spec should change but the builder took as it is (an old spec without `apiVersion`), for the
    /// command to print.
    pub warnings: Vec<String>,
}

impl Loaded {
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }
}

/// Reads and validates the spec at `path`; every remote input must be pinned.
pub fn load(path: &Path) -> Result<Loaded, SpecError> {
    load_with(path, Pins::Required)
}

/// Reads and validates the spec at `path`, with the pins required or not.
pub fn load_with(path: &Path, pins: Pins) -> Result<Loaded, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| SpecError {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    load_text(path, &text, pins)
}

/// Validates `text`, read from the spec at `path`.
pub fn load_text(path: &Path, text: &str, pins: Pins) -> Result<Loaded, SpecError> {
    let err = |message: String| SpecError {
        file: path.display().to_string(),
        message,
    };
    let spec = parse(text).map_err(err)?;
    spec.validate_with(pins).map_err(err)?;
    let dir = path.parent().map(Path::to_owned).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    Ok(Loaded {
        path: path.to_owned(),
        dir,
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
        warnings: version::warning(spec.api_version, spec.kind)
            .into_iter()
            .collect(),
        spec,
    })
}

/// Parses spec text; the error carries serde's line, column and field.
pub fn parse(text: &str) -> Result<Spec, String> {
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

/// Fuzzing entry point (see `fuzz/`): spec text as a user may write it is parsed once (most of the cost: a
/// parse error renders a snippet of the source) and validated with the pins required and not, without
/// panicking; what validates with every pin required validates with pins optional.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(spec) = parse(&text) else {
        return;
    };
    let required = spec.validate_with(Pins::Required);
    let optional = spec.validate_with(Pins::Optional);
    assert!(
        required.is_err() || optional.is_ok(),
        "valid with pins required, not with pins optional: {optional:?}"
    );
}

/// The JSON Schema of the spec format.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Spec)).expect("schemas serialize")
}

#[cfg(test)]
pub(crate) mod tests;
