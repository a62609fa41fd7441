//! What the types cannot check: names, digests, sizes, addresses, the Kubernetes component's inputs, and that
//! every remote input is pinned. Every error names the field.

use oci_client::Reference;

use super::{is_digest, parse_size, FileComponent, ImageComponent, Kubernetes, Pins, Spec};

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
        let flags = super::agent_flags(&self.components.agent_args)
            .map_err(|e| format!("components.agentArgs{e}"))?;
        // The image's kubelet asks for its serving certificate, which the agent's controllers approve.
        if self.components.kubernetes.is_some() {
            if let Some(i) = flags.iter().position(|(n, _)| n == "no-controllers") {
                return Err(format!(
                    "components.agentArgs: --no-controllers with components.kubernetes: the agent's \
                     controllers approve the kubelet's serving certificate (flag {i})"
                ));
            }
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
            if let Some(d) = &p.dhcp {
                crate::dhcp::plan(p, d)?;
            }
        }
        if self.components.kubernetes.is_none() && !self.components.manifests.is_empty() {
            return Err(
                "components.manifests: the bring-up applies them; add components.kubernetes".into(),
            );
        }
        if let Some(k) = &self.components.kubernetes {
            self.validate_kubernetes(k)?;
        }
        if self.components.site_ca.is_some() && !self.components.agent_tls {
            return Err("components.siteCa: it signs the agent's HTTPS certificate; set components.agentTls: true".into());
        }
        if let Some(n) = &self.components.node {
            if self.components.kubernetes.is_some() {
                return Err("components.node: a compute node's image has no Kubernetes of its own (the appliance's is components.kubernetes); choose one".into());
            }
            n.validate()?;
        }
        if let Some(m) = &self.components.metal3 {
            if self.components.kubernetes.is_none() {
                return Err("components.metal3: BMO runs against the appliance's cluster; add components.kubernetes".into());
            }
            if matches!(self.base.suite.as_str(), "bookworm" | "bullseye" | "buster") {
                return Err(format!(
                    "components.metal3: Ironic comes from the base suite's packages, and {}'s is older than \
                     Ironic 24 (API 1.89, which baremetal-operator needs); use base.suite: trixie",
                    self.base.suite
                ));
            }
            m.baremetal_operator.validate()?;
            if m.deploy_ramdisk.is_some()
                && crate::build::configure::provisioning_dhcp(self).is_none()
            {
                return Err("components.metal3.deployRamdisk: needs network.provisioning.dhcp (the ramdisk \
                            boots from the provisioning network and calls Ironic back on it)"
                    .into());
            }
            for (field, f) in m.baremetal_operator.archives() {
                validate_source(&field, &f, pins)?;
            }
        }
        for (field, f) in self.file_inputs() {
            validate_file(&field, &f, pins)?;
        }
        for (field, i) in self.image_binaries() {
            validate_source(&field, &i.to_file(None, None), pins)?;
        }
        for (i, im) in self.components.images.iter().enumerate() {
            validate_image(im, pins).map_err(|e| format!("components.images[{i}].{e}"))?;
        }
        if self.outputs.formats.is_empty() {
            return Err("outputs.formats: name at least one of raw, qcow2, iso, ramdisk".into());
        }
        if self.outputs.formats.contains(&super::Format::Ramdisk) && self.outputs.formats.len() > 1
        {
            return Err("outputs.formats: ramdisk is made alone (it has no disk to share with raw, qcow2 or iso)".into());
        }
        if let Some(i) = &self.components.ipa {
            validate_ipa(i, self)?;
            let (field, f) = i.files();
            validate_source(&field, &f, pins)?;
        }
        if let Some(level) = self.outputs.compression_level {
            let c = self.outputs.compression;
            let Some((levels, _)) = c.levels() else {
                return Err(format!(
                    "outputs.compressionLevel: {level} given, but outputs.compression is none (nothing is compressed)"
                ));
            };
            if !levels.contains(&level) {
                return Err(format!(
                    "outputs.compressionLevel: {level} is not a level of {} ({} to {})",
                    c.name(),
                    levels.start(),
                    levels.end()
                ));
            }
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

    fn validate_kubernetes(&self, k: &Kubernetes) -> Result<(), String> {
        let f = "components.kubernetes";
        k.version
            .strip_prefix("v1.")
            .and_then(|r| r.split_once('.'))
            .filter(|(m, p)| {
                m.parse::<u32>().is_ok()
                    && p.split('-')
                        .next()
                        .is_some_and(|p| p.parse::<u32>().is_ok())
            })
            .ok_or_else(|| {
                format!(
                    "{f}.version: {:?} is not a Kubernetes release like v1.35.4",
                    k.version
                )
            })?;
        for (name, i) in k.binaries() {
            if let Some(r) = &i.go {
                if let Some(rest) = r.strip_prefix(crate::source::KUBERNETES_MODULE) {
                    let version = rest.rsplit_once('@').map(|(_, v)| v).unwrap_or_default();
                    if version != k.version {
                        return Err(format!(
                            "{f}.{name}.go: {r:?} is not of the release {} (components.kubernetes.version)",
                            k.version
                        ));
                    }
                }
            }
        }
        for (name, im) in [
            ("pause", Some(&k.pause)),
            ("coredns", Some(&k.coredns)),
            ("etcd", k.etcd.as_ref()),
        ] {
            let Some(im) = im else { continue };
            let tagged = im.reference.rsplit_once(':').is_some_and(|(repo, tag)| {
                !repo.is_empty() && !tag.is_empty() && !tag.contains('/')
            });
            if !tagged || im.reference.contains('@') {
                return Err(format!(
                    "{f}.{name}.reference: {:?} must be a name with a tag, like registry.k8s.io/pause:3.10.1",
                    im.reference
                ));
            }
        }
        if k.node_address
            .parse::<std::net::Ipv4Addr>()
            .map_or(true, |a| a.is_loopback() || a.is_unspecified())
        {
            return Err(format!(
                "{f}.nodeAddress: {:?} is not an IPv4 address for a node",
                k.node_address
            ));
        }
        for (name, cidr) in [
            ("podSubnet", &k.pod_subnet),
            ("serviceSubnet", &k.service_subnet),
        ] {
            let ok = cidr.split_once('/').is_some_and(|(ip, len)| {
                ip.parse::<std::net::Ipv4Addr>().is_ok()
                    && len.parse::<u8>().is_ok_and(|l| (8..=24).contains(&l))
            });
            if !ok {
                return Err(format!(
                    "{f}.{name}: {cidr:?} is not an IPv4 CIDR of prefix length 8 to 24"
                ));
            }
        }
        Ok(())
    }
}

/// Checks one image entry; errors start with the field name (after `components.images[i].`).
pub(super) fn validate_image(im: &ImageComponent, pins: Pins) -> std::result::Result<(), String> {
    let r: Reference = im.reference.parse().map_err(|e| {
        format!(
            "reference: {:?} is not an image reference ({e})",
            im.reference
        )
    })?;
    if r.registry().contains(':') {
        return Err(format!(
            "reference: {:?}: the agent serves images under their names, and a repository name cannot hold \
             the registry's port ({}); pull through `source` and name the image without the port",
            im.reference,
            r.registry()
        ));
    }
    match (&im.digest, r.digest()) {
        (Some(pin), _) if !is_digest(pin) => {
            return Err(format!(
                "digest: {pin:?} is not sha256: and 64 lower-case hex digits (or sha512: and 128)"
            ))
        }
        (Some(pin), Some(d)) if d != pin => {
            return Err(format!(
                "reference: {:?} names digest {d}, not the pinned {pin}",
                im.reference
            ))
        }
        (None, _) if pins == Pins::Required => {
            return Err(format!(
                "digest: required (images are pinned by digest); `foothold-build pin` resolves {:?} and fills \
                 it in",
                im.reference
            ))
        }
        _ => {}
    }
    if let Some(s) = &im.source {
        let src: Reference = s
            .parse()
            .map_err(|e| format!("source: {s:?} is not a repository reference ({e})"))?;
        if src.tag().is_some_and(|t| t != "latest") || src.digest().is_some() || s.contains('@') {
            return Err(format!(
                "source: {s:?} names a tag or digest; give the repository only (the digest pins the image)"
            ));
        }
    }
    if im.platforms.is_empty() {
        return Err("platforms: name at least one, e.g. linux/amd64".into());
    }
    for (i, p) in im.platforms.iter().enumerate() {
        let parts: Vec<&str> = p.split('/').collect();
        if !(2..=3).contains(&parts.len())
            || parts
                .iter()
                .any(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            return Err(format!(
                "platforms[{i}]: {p:?} is not os/arch or os/arch/variant"
            ));
        }
    }
    Ok(())
}

/// Checks where an input comes from and its pin; `field` names it in errors.
fn validate_source(field: &str, f: &FileComponent, pins: Pins) -> Result<(), String> {
    let given = [
        f.archive.is_some(),
        f.url.is_some(),
        f.path.is_some(),
        f.go.is_some(),
        f.cc.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(format!("{field}: give exactly one of url, path, go and cc"));
    }
    if let Some(u) = &f.url {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(format!("{field}.url: {u:?} must be http(s)"));
        }
    }
    for (key, r) in [("go", &f.go), ("cc", &f.cc)] {
        if let Some(r) = r {
            crate::source::parse_reference(r).map_err(|e| format!("{field}.{key}: {e}"))?;
            if key == "cc" && !r.split('@').next().unwrap_or_default().ends_with(".c") {
                return Err(format!("{field}.cc: {r:?} does not name a .c file"));
            }
        }
    }
    if f.path.is_none() && f.sha256.is_none() && pins == Pins::Required {
        let how = if f.url.is_some() {
            "downloads"
        } else {
            "builds"
        };
        return Err(format!(
            "{field}.sha256: required (inputs are pinned); `foothold-build pin` {how} it and fills it in"
        ));
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
    Ok(())
}

/// Checks one file input; `field` names it in errors (`components.files[0]`, `components.kubernetes.kubelet`).
fn validate_file(field: &str, f: &FileComponent, pins: Pins) -> Result<(), String> {
    validate_source(field, f, pins)?;
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
        // The agent's own rule: what it would refuse over REST, the builder refuses here.
        for (part, v) in [
            ("owner", &sv.owner),
            ("cluster", &sv.cluster),
            ("name", &sv.name),
        ] {
            foothold_names::check_name(v).map_err(|why| format!("{field}.serve.{part}: {why}"))?;
        }
        if !sv.kind.is_file() {
            return Err(format!(
                "{field}.serve.kind: container_images are served by the registry; list the image in components.images"
            ));
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

/// What a deploy ramdisk's spec may hold: ironic-python-agent's package, made as `[ramdisk]` alone.
fn validate_ipa(i: &super::Ipa, spec: &Spec) -> Result<(), String> {
    let c = &spec.components;
    if c.kubernetes.is_some() || c.node.is_some() || c.metal3.is_some() || c.agent.is_some() {
        return Err(
            "components.ipa: a deploy ramdisk runs ironic-python-agent and nothing of the \
                    site (no agent, kubernetes, metal3 or node); put those in other specs"
                .into(),
        );
    }
    if spec.outputs.formats != [super::Format::Ramdisk] {
        return Err("outputs.formats: a deploy ramdisk (components.ipa) is made as [ramdisk]: \
                    Ironic boots its kernel and initramfs by PXE, and makes the virtual-media ISO itself"
            .into());
    }
    if !i.package.file_name().ends_with(".deb") {
        return Err(format!(
            "{}: {:?} is not a Debian package (.deb)",
            super::Ipa::FIELD,
            i.package.file_name()
        ));
    }
    Ok(())
}
