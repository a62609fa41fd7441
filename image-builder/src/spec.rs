//! The appliance spec (`packages/*.yaml`): what goes into an image, every remote input pinned by sha256.
//! `load` reports problems with the file, line and field; `schema` is the JSON Schema of the format.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
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
    /// Member of `sudo`.
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
    /// Extra arguments for `foothold-agent serve`.
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// Files placed into the image.
    #[serde(default)]
    pub files: Vec<FileComponent>,
    /// Files laid over the root file system (default: the repository's `rootfs/`).
    #[serde(default)]
    pub overlay: Option<PathBuf>,
    /// OCI image layouts (local directories) whose images the agent serves from first boot.
    #[serde(default)]
    pub image_layouts: Vec<LocalFile>,
    /// Container images pulled from registries, pinned by digest, served by the agent under their names.
    #[serde(default)]
    pub images: Vec<ImageComponent>,
    /// A single-node Kubernetes: k3s, started at boot with its registry mirror pointed at the agent.
    #[serde(default)]
    pub k3s: Option<K3s>,
    /// Kubernetes manifests k3s applies at first boot (and keeps applied), in order; needs `k3s`.
    #[serde(default)]
    pub manifests: Vec<Input>,
}

/// k3s and what it needs offline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K3s {
    /// The k3s binary (installed as /usr/local/bin/k3s).
    pub binary: Input,
    /// Air-gap image archives (`k3s-airgap-images-amd64.tar.zst`), imported by k3s at start.
    #[serde(default)]
    pub airgap_images: Vec<Input>,
    /// Extra arguments for `k3s server` (default: `--disable=traefik`).
    #[serde(default = "default_k3s_args")]
    pub args: Vec<String>,
}

fn default_k3s_args() -> Vec<String> {
    vec!["--disable=traefik".into()]
}

/// One input file: a URL pinned by sha256, or a local path (relative to the spec).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Input {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Hex sha256 of the content; required for `url` (`foothold-build pin` fills it in).
    #[serde(default)]
    pub sha256: Option<String>,
}

/// Where k3s picks up air-gap images and manifests.
pub const K3S_IMAGES_DIR: &str = "/var/lib/rancher/k3s/agent/images";
pub const K3S_MANIFESTS_DIR: &str = "/var/lib/rancher/k3s/server/manifests";

impl Input {
    /// The input's file name (of the URL's last path segment or the path).
    fn file_name(&self) -> String {
        let from_url = self.url.as_deref().and_then(|u| {
            let path = u.split(['?', '#']).next().unwrap_or(u);
            path.rsplit('/').next().filter(|s| !s.is_empty())
        });
        let from_path = self
            .path
            .as_deref()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned());
        from_url
            .map(str::to_owned)
            .or(from_path)
            .unwrap_or_else(|| "input".into())
            .replace('%', "_")
    }

    fn to_file(&self, dest: String, mode: Option<&str>) -> FileComponent {
        FileComponent {
            url: self.url.clone(),
            path: self.path.clone(),
            sha256: self.sha256.clone(),
            dest: Some(dest),
            serve: None,
            mode: mode.map(str::to_owned),
        }
    }
}

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

/// A file from a URL (pinned by sha256) or a local path.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileComponent {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Hex sha256 of the content; required for `url`.
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

fn default_owner() -> String {
    "foothold".into()
}

fn default_cluster() -> String {
    "site".into()
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ServeKind {
    #[serde(rename = "binary_images")]
    Binary,
    #[serde(rename = "os_images")]
    Os,
}

impl ServeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ServeKind::Binary => "binary_images",
            ServeKind::Os => "os_images",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Raw,
    Qcow2,
    Iso,
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
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Zstd,
    Xz,
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
    /// Checks what the types cannot: names, digests, sizes, addresses, and that every remote input is pinned.
    /// Errors name the field.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_with(Pins::Required)
    }

    /// `validate`, with the pins required or not.
    pub fn validate_with(&self, pins: Pins) -> Result<(), String> {
        let dns = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        if !dns(&self.name) {
            return Err(format!(
                "name: {:?} must be lower-case letters, digits and -",
                self.name
            ));
        }
        if !dns(&self.hostname) {
            return Err(format!(
                "hostname: {:?} must be lower-case letters, digits and -",
                self.hostname
            ));
        }
        if self.base.suite.is_empty()
            || !self
                .base
                .suite
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(format!(
                "base.suite: {:?} is not a Debian suite name",
                self.base.suite
            ));
        }
        if !(self.base.mirror.starts_with("http://") || self.base.mirror.starts_with("https://")) {
            return Err(format!(
                "base.mirror: {:?} must be an http(s) URL",
                self.base.mirror
            ));
        }
        for (i, p) in self.base.packages.iter().enumerate() {
            if p.is_empty() || p.contains([' ', ',']) {
                return Err(format!("base.packages[{i}]: {p:?} is not a package name"));
            }
        }
        for (i, u) in self.users.iter().enumerate() {
            if !dns(&u.name) || u.name == "root" {
                return Err(format!(
                    "users[{i}].name: {:?} must be a lower-case user name other than root",
                    u.name
                ));
            }
            for (j, k) in u.authorized_keys.iter().enumerate() {
                if !(k.starts_with("ssh-") || k.starts_with("ecdsa-") || k.starts_with("sk-"))
                    || k.contains('\n')
                {
                    return Err(format!(
                        "users[{i}].authorizedKeys[{j}]: not an OpenSSH public key line"
                    ));
                }
            }
        }
        if let Some(p) = &self.network.provisioning {
            let (ip, len) = p.address.split_once('/').ok_or_else(|| {
                format!(
                    "network.provisioning.address: {:?} needs a prefix length (/24)",
                    p.address
                )
            })?;
            let ip: std::net::IpAddr = ip.parse().map_err(|_| {
                format!("network.provisioning.address: {ip:?} is not an IP address")
            })?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if !len.parse::<u8>().is_ok_and(|l| l <= max) {
                return Err(format!(
                    "network.provisioning.address: prefix length {len:?} is not 0..={max}"
                ));
            }
        }
        if self.components.k3s.is_none() && !self.components.manifests.is_empty() {
            return Err("components.manifests: k3s applies them; add components.k3s".into());
        }
        if let Some(k) = &self.components.k3s {
            for (i, a) in k.args.iter().enumerate() {
                if a.contains(['\n', '"', '\\']) {
                    return Err(format!(
                        "components.k3s.args[{i}]: {a:?} holds a newline, quote or backslash"
                    ));
                }
            }
        }
        for (field, f) in self.file_inputs() {
            validate_file(&field, &f, pins)?;
        }
        for (i, im) in self.components.images.iter().enumerate() {
            crate::images::validate(im, pins).map_err(|e| format!("components.images[{i}].{e}"))?;
        }
        if self.outputs.formats.is_empty() {
            return Err("outputs.formats: name at least one of raw, qcow2, iso".into());
        }
        let disk =
            parse_size(&self.outputs.disk_size).map_err(|e| format!("outputs.diskSize: {e}"))?;
        let data = self.data_size()?;
        if disk < data + (1 << 30) {
            return Err(format!(
                "outputs.diskSize: {} leaves under 1 GiB for the system beside the {} MiB data partition",
                self.outputs.disk_size,
                data >> 20
            ));
        }
        if disk % (1 << 20) != 0 {
            return Err(format!(
                "outputs.diskSize: {} is not a whole number of MiB",
                self.outputs.disk_size
            ));
        }
        Ok(())
    }

    /// Every file the image gets, named by its spec field: `files`, then k3s's binary and air-gap images, then
    /// the manifests (placed where k3s applies them, numbered to keep their order).
    pub fn file_inputs(&self) -> Vec<(String, FileComponent)> {
        let c = &self.components;
        let mut out: Vec<(String, FileComponent)> = c
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("components.files[{i}]"), f.clone()))
            .collect();
        if let Some(k) = &c.k3s {
            out.push((
                "components.k3s.binary".into(),
                k.binary.to_file("/usr/local/bin/k3s".into(), Some("0755")),
            ));
            for (i, a) in k.airgap_images.iter().enumerate() {
                out.push((
                    format!("components.k3s.airgapImages[{i}]"),
                    a.to_file(format!("{K3S_IMAGES_DIR}/{}", a.file_name()), None),
                ));
            }
        }
        for (i, m) in c.manifests.iter().enumerate() {
            out.push((
                format!("components.manifests[{i}]"),
                m.to_file(
                    format!("{K3S_MANIFESTS_DIR}/foothold-{i:02}-{}", m.file_name()),
                    Some("0600"),
                ),
            ));
        }
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
}

/// Checks one file input; `field` names it in errors (`components.files[0]`, `components.k3s.binary`).
fn validate_file(field: &str, f: &FileComponent, pins: Pins) -> Result<(), String> {
    match (&f.url, &f.path) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(format!("{field}: give exactly one of url and path"))
        }
        (Some(u), None) => {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!("{field}.url: {u:?} must be http(s)"));
            }
            if f.sha256.is_none() && pins == Pins::Required {
                return Err(format!(
                    "{field}.sha256: required for a url (inputs are pinned); `foothold-build pin` downloads it \
                     and fills it in"
                ));
            }
        }
        _ => {}
    }
    if let Some(h) = &f.sha256 {
        if h.len() != 64
            || !h
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(format!(
                "{field}.sha256: {h:?} is not 64 lower-case hex digits"
            ));
        }
    }
    if f.dest.is_none() && f.serve.is_none() {
        return Err(format!(
            "{field}: give dest (a path in the image), serve, or both"
        ));
    }
    if let Some(d) = &f.dest {
        if !d.starts_with('/') || d.contains("/../") || d.ends_with("/..") {
            return Err(format!("{field}.dest: {d:?} must be an absolute path"));
        }
    }
    if let Some(sv) = &f.serve {
        for (part, v) in [
            ("owner", &sv.owner),
            ("cluster", &sv.cluster),
            ("name", &sv.name),
        ] {
            if v.is_empty() || v.contains(['/', '\\', ' ']) || v == "." || v == ".." {
                return Err(format!(
                    "{field}.serve.{part}: {v:?} must be one path segment"
                ));
            }
        }
    }
    if let Some(m) = &f.mode {
        if u32::from_str_radix(m, 8).map_or(true, |m| m > 0o7777) {
            return Err(format!(
                "{field}.mode: {m:?} is not an octal mode like 0755"
            ));
        }
    }

    Ok(())
}

/// A loaded spec: the parsed value, its directory (relative paths start there) and the hash of its text.
pub struct Loaded {
    pub spec: Spec,
    pub path: PathBuf,
    pub dir: PathBuf,
    pub sha256: String,
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
        spec,
        path: path.to_owned(),
        dir,
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
    })
}

/// Parses spec text; the error carries serde's line, column and field.
pub fn parse(text: &str) -> Result<Spec, String> {
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

/// The JSON Schema of the spec format.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Spec)).expect("schemas serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: lab\nbase:\n  suite: bookworm\nhostname: foothold\noutputs:\n  formats: [raw]\n  diskSize: 4GiB\n";

    #[test]
    fn a_minimal_spec_parses_and_validates() {
        let s = parse(GOOD).unwrap();
        s.validate().unwrap();
        assert_eq!(s.base.mirror, "http://deb.debian.org/debian");
        assert_eq!(s.disk_size(), 4 << 30);
        assert_eq!(s.data_size().unwrap(), 1 << 30);
        assert_eq!(s.outputs.bootloader, Bootloader::Grub);
        let sd = parse(&format!("{GOOD}  bootloader: systemd-boot\n")).unwrap();
        assert_eq!(sd.outputs.bootloader, Bootloader::SystemdBoot);
        assert_eq!(s.outputs.compression, Compression::None);
        let z = parse(&format!("{GOOD}  compression: zstd\n")).unwrap();
        assert_eq!(z.outputs.compression, Compression::Zstd);
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = parse(&GOOD.replace("hostname", "hostnme")).unwrap_err();
        assert!(e.contains("hostnme") && e.contains("line 4"), "{e}");
        let e = parse(&GOOD.replace("[raw]", "[raw, vmdk]")).unwrap_err();
        assert!(e.contains("vmdk") && e.contains("line 6"), "{e}");
        let e = parse(&format!("{GOOD}  bootloader: lilo\n")).unwrap_err();
        assert!(e.contains("lilo") && e.contains("line 8"), "{e}");
        let e = parse(&format!("{GOOD}  compression: gzip\n")).unwrap_err();
        assert!(e.contains("gzip") && e.contains("line 8"), "{e}");
        let bad = |from: &str, to: &str| {
            parse(&GOOD.replace(from, to))
                .unwrap()
                .validate()
                .unwrap_err()
        };
        assert!(bad("4GiB", "4GB").contains("outputs.diskSize"));
        assert!(bad("4GiB", "1GiB").contains("leaves under 1 GiB"));
        assert!(bad("name: lab", "name: Lab").starts_with("name:"));
        let with_file = |f: &str| {
            let mut s = parse(GOOD).unwrap();
            s.components.files.push(serde_saphyr::from_str(f).unwrap());
            s.validate().unwrap_err()
        };
        assert!(with_file("url: https://x/k3s\ndest: /usr/local/bin/k3s")
            .contains("components.files[0].sha256: required"));
        // Before `pin`, a url may lack its sha256; nothing else is relaxed.
        let mut s = parse(GOOD).unwrap();
        s.components
            .files
            .push(serde_saphyr::from_str("url: https://x/k3s\ndest: /usr/local/bin/k3s").unwrap());
        s.validate_with(Pins::Optional).unwrap();
        s.components.files[0].dest = None;
        assert!(s
            .validate_with(Pins::Optional)
            .unwrap_err()
            .contains("components.files[0]: give dest"));
        assert!(with_file("path: k3s\ndest: usr/bin/k3s").contains("components.files[0].dest"));
        assert!(with_file("path: k3s").contains("components.files[0]: give dest"));
        assert!(with_file("path: k3s\nserve: {kind: os_images, name: a/b}")
            .contains("components.files[0].serve.name"));
        assert!(with_file("path: k3s\ndest: /usr/bin/k3s\nmode: '0999'")
            .contains("components.files[0].mode"));
    }

    #[test]
    fn k3s_and_manifests_become_files_where_k3s_looks() {
        let mut s = parse(GOOD).unwrap();
        s.components.manifests.push(Input {
            url: None,
            path: Some("metal3.yaml".into()),
            sha256: None,
        });
        assert!(s.validate().unwrap_err().contains("add components.k3s"));
        s.components.k3s = Some(
            serde_saphyr::from_str(
                "binary: {url: 'https://example.com/v1.31.4%2Bk3s1/k3s', sha256: '%'}\nairgapImages: [{path: a/k3s-airgap-images-amd64.tar.zst}]",
            )
            .unwrap(),
        );
        assert!(s
            .validate()
            .unwrap_err()
            .starts_with("components.k3s.binary.sha256:"));
        s.components.k3s.as_mut().unwrap().binary.sha256 = Some("a".repeat(64));
        s.validate().unwrap();
        assert_eq!(
            s.components.k3s.as_ref().unwrap().args,
            vec!["--disable=traefik"]
        );
        let files: Vec<(String, Option<String>)> = s
            .file_inputs()
            .into_iter()
            .map(|(field, f)| (field, f.dest))
            .collect();
        assert_eq!(
            files,
            vec![
                (
                    "components.k3s.binary".into(),
                    Some("/usr/local/bin/k3s".into())
                ),
                (
                    "components.k3s.airgapImages[0]".into(),
                    Some(format!("{K3S_IMAGES_DIR}/k3s-airgap-images-amd64.tar.zst"))
                ),
                (
                    "components.manifests[0]".into(),
                    Some(format!("{K3S_MANIFESTS_DIR}/foothold-00-metal3.yaml"))
                ),
            ]
        );
        s.components.k3s.as_mut().unwrap().args = vec!["--a\nb".into()];
        assert!(s
            .validate()
            .unwrap_err()
            .starts_with("components.k3s.args[0]"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert!(parse_size("1.5GiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }

    #[test]
    fn the_schema_names_every_top_level_field() {
        let s = schema();
        let props = s["properties"].as_object().unwrap();
        for f in [
            "name",
            "base",
            "hostname",
            "users",
            "network",
            "components",
            "outputs",
        ] {
            assert!(props.contains_key(f), "{f}");
        }
    }
}
