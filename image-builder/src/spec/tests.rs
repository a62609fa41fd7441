//! The spec's parsing and validation, from strings: each error names the field and the reason.

use super::validate::validate_image;
use super::*;

/// An image entry, pinned, for linux/amd64.
pub(crate) fn image(reference: &str) -> ImageComponent {
    ImageComponent {
        reference: reference.into(),
        digest: Some(format!("sha256:{}", "a".repeat(64))),
        source: None,
        platforms: vec!["linux/amd64".into()],
    }
}

#[test]
fn validation_names_the_field() {
    let ok = |im: ImageComponent| validate_image(&im, Pins::Required).unwrap();
    ok(image("quay.io/metal3-io/ironic:v26.0.1"));
    ok(image("busybox"));
    assert!(validate_image(&image("mirror:5000/a/b:1"), Pins::Required)
        .unwrap_err()
        .contains("port"));
    let e = |im: ImageComponent| validate_image(&im, Pins::Required).unwrap_err();
    assert!(e(image("Quay.io/UPPER:x")).starts_with("reference:"));
    let mut im = image("busybox:1");
    im.digest = Some("sha256:abc".into());
    assert!(e(im.clone()).starts_with("digest:"));
    assert!(validate_image(&im, Pins::Optional)
        .unwrap_err()
        .starts_with("digest:"));
    // sha512 pins are 128 hex digits; other algorithms are refused.
    for (pin, valid) in [
        (format!("sha512:{}", "c".repeat(128)), true),
        (format!("sha512:{}", "c".repeat(64)), false),
        (format!("sha384:{}", "c".repeat(96)), false),
        (format!("sha256:{}", "C".repeat(64)), false),
    ] {
        let mut im = image("busybox:1");
        im.digest = Some(pin.clone());
        assert_eq!(validate_image(&im, Pins::Required).is_ok(), valid, "{pin}");
    }
    let pin = format!("sha512:{}", "d".repeat(128));
    let mut long = image(&format!("busybox@{pin}"));
    long.digest = Some(pin);
    ok(long);
    // Unpinned: an error for a build, fine for `pin`.
    im.digest = None;
    assert!(e(im.clone()).contains("foothold-build pin"));
    validate_image(&im, Pins::Optional).unwrap();
    let im = image(&format!("busybox@sha256:{}", "b".repeat(64)));
    assert!(e(im).contains("not the pinned"));
    let mut im = image("busybox:1");
    im.source = Some("mirror:5000/library/busybox:1".into());
    assert!(e(im).starts_with("source:"));
    let mut im = image("busybox:1");
    im.platforms = vec!["linux".into()];
    assert!(e(im.clone()).starts_with("platforms[0]:"));
    im.platforms = vec![];
    assert!(e(im).starts_with("platforms:"));
}

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
    assert_eq!(s.compression_level(), None);
    assert_eq!(z.compression_level(), Some(10));
    let x = parse(&format!("{GOOD}  compression: xz\n  compressionLevel: 1\n")).unwrap();
    x.validate().unwrap();
    assert_eq!(x.compression_level(), Some(1));
}

#[test]
fn a_compression_level_is_one_its_compressor_takes() {
    let level = |c: &str, l: u8| {
        parse(&format!(
            "{GOOD}  compression: {c}\n  compressionLevel: {l}\n"
        ))
        .unwrap()
        .validate()
    };
    assert_eq!(
        level("xz", 10).unwrap_err(),
        "outputs.compressionLevel: 10 is not a level of xz (0 to 9)"
    );
    assert_eq!(
        level("zstd", 0).unwrap_err(),
        "outputs.compressionLevel: 0 is not a level of zstd (1 to 19)"
    );
    level("zstd", 19).unwrap();
    level("xz", 0).unwrap();
    let e = parse(&format!("{GOOD}  compressionLevel: 3\n"))
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        e.contains("outputs.compressionLevel") && e.contains("compression is none"),
        "{e}"
    );
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
        .contains("components.files[0].serve.name: \"a/b\" contains a path separator"));
    // The agent's rule and kinds: a space is fine in a name, a container image is not a file.
    let mut s = parse(GOOD).unwrap();
    s.components.files.push(
        serde_saphyr::from_str("path: k3s\nserve: {kind: os_images, name: 'ubuntu 22.04.img'}")
            .unwrap(),
    );
    s.validate().unwrap();
    assert!(
        with_file("path: k3s\nserve: {kind: container_images, name: a}").contains(
            "components.files[0].serve.kind: container_images are served by the registry"
        )
    );
    assert!(with_file("path: k3s\ndest: /usr/bin/k3s\nmode: '0999'")
        .contains("components.files[0].mode"));
}

const KUBERNETES: &str = "network:\n  provisioning: {interface: ens4, address: 172.22.0.1/24}\ncomponents:\n  kubernetes:\n    version: v1.35.4\n    kubelet: {go: k8s.io/kubernetes/cmd/kubelet@v1.35.4, sha256: HEX}\n    kubeApiserver: {go: k8s.io/kubernetes/cmd/kube-apiserver@v1.35.4, sha256: HEX}\n    kubeControllerManager: {go: k8s.io/kubernetes/cmd/kube-controller-manager@v1.35.4, sha256: HEX}\n    kubeScheduler: {go: k8s.io/kubernetes/cmd/kube-scheduler@v1.35.4, sha256: HEX}\n    kubeProxy: {url: 'https://dl.k8s.io/release/v1.35.4/bin/linux/amd64/kube-proxy', sha256: HEX}\n    kubectl: {go: k8s.io/kubernetes/cmd/kubectl@v1.35.4, sha256: HEX}\n    kubeadm: {go: k8s.io/kubernetes/cmd/kubeadm@v1.35.4, sha256: HEX}\n    pause: {reference: 'registry.k8s.io/pause:3.10.1', binary: {cc: k8s.io/kubernetes/build/pause/linux/pause.c@v1.35.4, sha256: HEX}}\n    coredns: {reference: 'registry.k8s.io/coredns/coredns:v1.13.1', binary: {go: github.com/coredns/coredns@v1.13.1, sha256: HEX}}\n  manifests: [{path: crds.yaml}]\n";

fn kubernetes_spec(edit: impl Fn(String) -> String) -> Result<Spec, String> {
    let text = format!("{GOOD}{}", KUBERNETES.replace("HEX", &"a".repeat(64)));
    let s = parse(&edit(text))?;
    s.validate()?;
    Ok(s)
}

#[test]
fn kubernetes_binaries_and_manifests_become_files_where_the_bring_up_looks() {
    let s = kubernetes_spec(|t| t).unwrap();
    let files: Vec<(String, Option<String>)> = s
        .file_inputs()
        .into_iter()
        .map(|(field, f)| (field, f.dest))
        .collect();
    assert_eq!(
        files[0],
        (
            "components.kubernetes.kubelet".into(),
            Some("/usr/local/bin/kubelet".into())
        )
    );
    assert_eq!(
        files[1],
        (
            "components.kubernetes.kubeApiserver".into(),
            Some("/usr/local/bin/kube-apiserver".into())
        )
    );
    assert_eq!(
        files[7],
        (
            "components.manifests[0]".into(),
            Some(format!("{KUBE_MANIFESTS_DIR}/00-crds.yaml"))
        )
    );
    let built: Vec<String> = s.image_binaries().into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        built,
        [
            "components.kubernetes.pause.binary",
            "components.kubernetes.coredns.binary"
        ]
    );
    assert_eq!(s.sources().len(), 10);
    let k = s.components.kubernetes.as_ref().unwrap();
    assert_eq!(
        (k.pod_subnet.as_str(), k.service_subnet.as_str()),
        ("10.244.0.0/16", "10.96.0.0/12")
    );
}

#[test]
fn kubernetes_errors_name_the_field() {
    let bad = |from: &str, to: &str| kubernetes_spec(|t| t.replacen(from, to, 1)).unwrap_err();
    assert!(bad("version: v1.35.4", "version: 1.35").starts_with("components.kubernetes.version"));
    assert!(
        bad("kubelet@v1.35.4", "kubelet@v1.34.0").starts_with("components.kubernetes.kubelet.go")
    );
    assert!(bad("kubelet@v1.35.4", "kubelet").starts_with("components.kubernetes.kubelet.go"));
    assert!(bad("pause.c@", "pause.h@").starts_with("components.kubernetes.pause.binary.cc"));
    assert!(bad("pause:3.10.1", "pause").starts_with("components.kubernetes.pause.reference"));
    assert!(
        bad("kubelet: {go", "kubelet: {url: 'https://x/kubelet', go")
            .starts_with("components.kubernetes.kubelet: give exactly one")
    );
    assert!(bad(
        "version: v1.35.4\n",
        "version: v1.35.4\n    nodeAddress: 127.0.0.1\n"
    )
    .starts_with("components.kubernetes.nodeAddress"));
    assert!(bad(
        "version: v1.35.4\n",
        "version: v1.35.4\n    podSubnet: 10.244.0.0/28\n"
    )
    .starts_with("components.kubernetes.podSubnet"));
    let e = bad("kubeadm: {", "kubeadmin: {");
    assert!(e.contains("kubeadmin"), "{e}");
    // Nothing would approve the kubelet's serving certificate.
    let e = bad(
        "components:\n  kubernetes:",
        "components:\n  agentArgs: [--lease-duration-seconds, '60', --no-controllers]\n  kubernetes:",
    );
    assert_eq!(
        e,
        "components.agentArgs: --no-controllers with components.kubernetes: the agent's controllers approve \
         the kubelet's serving certificate (flag 1)"
    );
    // Unpinned, a source build is what `pin` fills in.
    let text = format!("{GOOD}{}", KUBERNETES.replace(", sha256: HEX", ""));
    let s = parse(&text).unwrap();
    assert!(s
        .validate()
        .unwrap_err()
        .contains("`foothold-build pin` builds it"));
    s.validate_with(Pins::Optional).unwrap();
    let mut s = parse(GOOD).unwrap();
    s.components.manifests.push(Input {
        path: Some("crds.yaml".into()),
        ..Input::default()
    });
    assert!(s
        .validate()
        .unwrap_err()
        .contains("add components.kubernetes"));
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

const METAL3: &str = "  metal3:\n    baremetalOperator:\n      source: {path: ../third_party/baremetal-operator-02aa5059e348.tar.gz, sha256: HEX}\n      replace:\n        - module: github.com/metal3-io/ironic-standalone-operator/api\n          source: {path: ../third_party/ironic-standalone-operator-api-c75aa296a52a.tar.gz, sha256: HEX}\n      patches:\n        - {path: ../patches/bmo/1.patch, sha256: HEX}\n      manager: {sha256: HEX}\n      plugin: {sha256: HEX}\n";

/// The appliance's shape: trixie, Kubernetes and Metal3.
pub(crate) fn metal3_spec(edit: impl Fn(String) -> String) -> Result<Spec, String> {
    kubernetes_spec(|t| {
        edit(t.replace("suite: bookworm", "suite: trixie").replace(
            "  manifests:",
            &format!("{}  manifests:", METAL3.replace("HEX", &"b".repeat(64))),
        ))
    })
}

#[test]
fn metal3_builds_two_binaries_from_its_archives_and_places_them_where_bmo_looks() {
    let s = metal3_spec(|t| t).unwrap();
    let files = s.file_inputs();
    let (field, manager) = &files[7];
    assert_eq!(field, "components.metal3.baremetalOperator.manager");
    assert_eq!(manager.dest.as_deref(), Some(BMO_BIN));
    let recipe = manager.archive.as_ref().unwrap();
    assert_eq!((recipe.package.as_str(), recipe.plugin), (".", false));
    assert_eq!(
        recipe.replace[0].0,
        "github.com/metal3-io/ironic-standalone-operator/api"
    );
    assert_eq!(recipe.patches.len(), 1);
    assert_eq!(recipe.patches[0].name, "1.patch");
    assert_eq!(recipe.patches[0].sha256, "b".repeat(64));
    let (field, plugin) = &files[8];
    assert_eq!(field, "components.metal3.baremetalOperator.plugin");
    assert_eq!(
        plugin.dest.as_deref(),
        Some("/usr/local/lib/metal3/plugins/ironic-provisioner.so")
    );
    assert!(plugin.archive.as_ref().unwrap().plugin);
    assert_eq!(
        plugin.source_ref().unwrap(),
        (
            "sha256",
            "baremetal-operator-02aa5059e348.tar.gz:./pkg/provisioner/ironic/plugin (plugin)"
                .into()
        )
    );
    // The archives are fetched and checked, placed nowhere.
    let sources: Vec<(String, Option<String>)> =
        s.sources().into_iter().map(|(f, c)| (f, c.dest)).collect();
    assert!(sources.contains(&("components.metal3.baremetalOperator.source".into(), None)));
    assert!(sources.contains(&(
        "components.metal3.baremetalOperator.replace[0].source".into(),
        None
    )));
    assert!(sources.contains(&(
        "components.metal3.baremetalOperator.patches[0]".into(),
        None
    )));
}

#[test]
fn metal3_errors_name_the_field() {
    let bad = |from: &str, to: &str| metal3_spec(|t| t.replacen(from, to, 1)).unwrap_err();
    let e = bad("suite: trixie", "suite: bookworm");
    assert!(
        e.starts_with("components.metal3: Ironic comes from the base suite's packages"),
        "{e}"
    );
    let e = bad(".tar.gz, sha256: bbbb", ".tar.gz, x: bbbb");
    assert!(e.contains("x"), "{e}");
    let pin = format!(", sha256: {}", "b".repeat(64));
    let e = bad(&format!("c75aa296a52a.tar.gz{pin}"), "c75aa296a52a.tar.gz");
    assert_eq!(
        e,
        "components.metal3.baremetalOperator.replace[0].source.sha256: required (a source archive or patch is pinned, wherever it is)"
    );
    let e = bad(&format!("1.patch{pin}"), "1.patch");
    assert_eq!(
        e,
        "components.metal3.baremetalOperator.patches[0].sha256: required (a source archive or patch is pinned, wherever it is)"
    );
    let e = bad("module: github.com/metal3-io", "module: metal3-io");
    assert!(
        e.starts_with("components.metal3.baremetalOperator.replace[0].module: "),
        "{e}"
    );
    // Unpinned, the manager is what `pin` builds.
    let e = bad(
        &format!("manager: {{sha256: {}}}", "b".repeat(64)),
        "manager: {}",
    );
    assert!(
        e.starts_with("components.metal3.baremetalOperator.manager.sha256: required"),
        "{e}"
    );
    let e = metal3_spec(|t| {
        let start = t.find("  kubernetes:").unwrap();
        let end = t.find("  metal3:").unwrap();
        format!("{}{}", &t[..start], &t[end..]).replace("  manifests: [{path: crds.yaml}]\n", "")
    })
    .unwrap_err();
    assert!(
        e.starts_with("components.metal3: BMO runs against the appliance's cluster"),
        "{e}"
    );
}

#[test]
fn a_node_image_places_the_site_ca_and_names_its_errors() {
    let node = |extra: &str| {
        let s = parse(&format!("{GOOD}components:\n  node:\n{extra}")).unwrap();
        s.validate().map(|()| s)
    };
    let s = node("    mirror: https://172.22.0.1:5000\n    ca: {path: site-ca.pem}\n").unwrap();
    let files = s.file_inputs();
    assert_eq!(files[0].0, "components.node.ca");
    assert_eq!(files[0].1.dest.as_deref(), Some(SITE_CA));
    assert_eq!(
        node("    mirror: https://172.22.0.1:5000\n").unwrap_err(),
        "components.node.ca: required for an https mirror (the appliance's /etc/foothold/tls/ca.pem)"
    );
    assert!(node("    mirror: 172.22.0.1:5000\n")
        .unwrap_err()
        .starts_with("components.node.mirror: "));
    assert!(node("    mirror: http://a/b\n")
        .unwrap_err()
        .contains("scheme://host[:port] only"));
    assert!(node("    mirror: http://a:5000\n    prefetch: [busybox]\n")
        .unwrap_err()
        .starts_with("components.node.prefetch[0]: "));
    node("    mirror: http://a:5000\n    prefetch: [docker.io/library/busybox:1.35]\n").unwrap();
    let e = kubernetes_spec(|t| {
        t.replace(
            "  manifests:",
            "  node: {mirror: 'http://a:5000'}\n  manifests:",
        )
    })
    .unwrap_err();
    assert!(
        e.starts_with("components.node: a compute node's image has no Kubernetes"),
        "{e}"
    );
}

#[test]
fn a_site_ca_made_before_the_appliance_is_placed_beside_the_key_it_takes_at_boot() {
    let spec = |extra: &str| {
        let s = parse(&format!(
            "{GOOD}components:\n{extra}  siteCa: {{path: site-ca.pem}}\n"
        ))
        .unwrap();
        s.validate().map(|()| s)
    };
    let s = spec("  agentTls: true\n").unwrap();
    let files = s.file_inputs();
    let (field, f) = files.iter().find(|(f, _)| f == SITE_CA_FIELD).unwrap();
    assert_eq!(field, "components.siteCa");
    assert_eq!(f.dest.as_deref(), Some("/etc/foothold/tls/ca.pem"));
    assert_eq!(f.mode.as_deref(), Some("0644"));
    assert_eq!(
        spec("").unwrap_err(),
        "components.siteCa: it signs the agent's HTTPS certificate; set components.agentTls: true"
    );
}

#[test]
fn the_provisioning_networks_dhcp_is_checked_with_the_spec() {
    let spec = |dhcp: &str| {
        parse(&format!(
            "{GOOD}network:\n  provisioning:\n    interface: ens4\n    address: 172.22.0.1/24\n    dhcp: {dhcp}\n"
        ))
    };
    let ok = spec("{range: 172.22.0.10-172.22.0.100, leaseTime: 2h}").unwrap();
    ok.validate().unwrap();
    assert_eq!(
        ok.network
            .provisioning
            .unwrap()
            .dhcp
            .unwrap()
            .lease_time
            .as_deref(),
        Some("2h")
    );
    let e = spec("{range: 172.22.0.1-172.22.0.100}")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(
        e,
        "network.provisioning.dhcp.range: 172.22.0.1-172.22.0.100 includes the appliance's own address 172.22.0.1"
    );
    let e = spec("{range: 172.22.0.10-172.22.0.100, lease: 2h}").unwrap_err();
    assert!(e.contains("lease"), "{e}");
}

#[test]
fn a_deploy_ramdisk_is_made_alone_and_names_its_errors() {
    let deb = format!(
        "  ipa:\n    package: {{url: https://deb.debian.org/debian/pool/main/i/ironic-python-agent/ironic-python-agent_10.2.0-3_all.deb, sha256: {}}}\n",
        "a".repeat(64)
    );
    let spec = |formats: &str, components: &str| {
        let s = parse(&format!(
            "{}components:\n{components}",
            GOOD.replace("[raw]", formats)
        ))?;
        s.validate().map(|()| s)
    };
    let s = spec("[ramdisk]", &deb).unwrap();
    // Fetched and checked like any input, unpacked rather than placed.
    let (field, f) = s.sources().pop().unwrap();
    assert_eq!(field, "components.ipa.package");
    assert_eq!(f.dest, None);
    assert!(s.file_inputs().is_empty());
    assert_eq!(
        spec("[raw, ramdisk]", "  files: []\n").unwrap_err(),
        "outputs.formats: ramdisk is made alone (it has no disk to share with raw, qcow2 or iso)"
    );
    assert!(spec("[raw]", &deb)
        .unwrap_err()
        .starts_with("outputs.formats: a deploy ramdisk (components.ipa) is made as [ramdisk]"));
    let e = spec("[ramdisk]", &format!("{deb}  agent: {{path: a}}\n")).unwrap_err();
    assert!(
        e.starts_with(
            "components.ipa: a deploy ramdisk runs ironic-python-agent and nothing of the site"
        ),
        "{e}"
    );
    let e = spec("[ramdisk]", &deb.replace("_all.deb", "_all.tar")).unwrap_err();
    assert!(e.ends_with("is not a Debian package (.deb)"), "{e}");
    let e = spec("[ramdisk]", &deb.replace(&"a".repeat(64), "abc")).unwrap_err();
    assert!(e.starts_with("components.ipa.package.sha256: "), "{e}");
}

#[test]
fn a_deploy_ramdisk_needs_the_provisioning_network_served() {
    let e = metal3_spec(|t| {
        t.replace(
            "  manifests:",
            "    deployRamdisk: {kernel: {path: k}, initramfs: {path: i}}\n  manifests:",
        )
    })
    .unwrap_err();
    assert!(
        e.starts_with("components.metal3.deployRamdisk: needs network.provisioning.dhcp"),
        "{e}"
    );
}
