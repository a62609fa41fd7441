//! Metal3 provisioning a compute node to disk, with real parts on a provisioning network the appliance serves:
//!
//! - the appliance is its own root file system, taken out of the raw image `foothold-build` makes of
//!   `packages/appliance.yaml` (its provisioning network's DHCP on, the deploy ramdisk of `packages/ipa.yaml` in
//!   it), its units run on this host's CPU (`tests/fixtures/native-site.sh`): the control plane, the agent,
//!   Ironic, BMO, Ironic's HTTP root and dnsmasq, as the image configures them;
//! - on one bridge inside a network namespace this test makes, named as the spec names the appliance's
//!   provisioning NIC, with its address: a libvirt domain (UEFI, TCG) whose NIC is on that bridge, its IPMI BMC
//!   (virtualbmc, on an address of its own there), and an HTTP server with the node's disk image;
//! - a BareMetalHost with the BMC's `ipmi://` address, its boot MAC, and no hardware of Foothold's making.
//!
//! The host is inspected (the VM boots the deploy ramdisk by PXE and iPXE from the appliance), its disks'
//! metadata cleaned and it becomes available with what inspection found; given the node image and its checksum
//! file it is provisioned: the ramdisk writes the image and Metal3's config drive to the disk, and the node
//! boots from it, named as the BareMetalHost (the config drive applied), with an address from the appliance's
//! DHCP, and reports ready. Nothing leaves the namespace.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use foothold_e2e::deadline::tail_file;
use foothold_e2e::netns::{Namespace, Running};
use foothold_e2e::{
    build_binaries, build_node_image_prefetching, run, target, tools_dir, try_run, workspace,
    Deadline,
};

const APPLIANCE: &str = "172.22.0.1";
const BMC: &str = "172.22.0.2";
const BMC_PORT: u16 = 6230;
const NODE: &str = "node-ipmi";
const MAC: &str = "52:54:00:22:10:01";
const MEMORY_MIB: u64 = 3072;
const VCPUS: u64 = 2;
const DISK_GIB: u64 = 10;
/// The port the node image is served on, beside the appliance's address.
const IMAGES_PORT: u16 = 8080;

/// The appliance's root, running in the namespace: commands enter its mount and network namespaces.
struct Site {
    root: PathBuf,
    /// The site script, PID 1 of its PID namespace; killing it ends everything it started.
    _script: Running,
    /// The script's PID as this host sees it, for nsenter.
    pid: u32,
}

impl Site {
    /// `program` in the site's mount, network and PID namespaces (its libvirtd, which looks its clients up in
    /// the namespace's /proc; the appliance's mounts).
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.pid.to_string())
            .args(["-m", "-n", "-p", "--"])
            .arg(program);
        c
    }

    /// The appliance's kubectl on its admin kubeconfig.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        try_run(
            self.command("chroot")
                .arg(&self.root)
                .args([
                    "kubectl",
                    "--kubeconfig",
                    "/etc/kubernetes/admin.conf",
                    "--request-timeout=60s",
                ])
                .args(args),
        )
    }

    fn kubectl_apply(&self, yaml: &str) {
        // Not /tmp: the site mounts its own there.
        let file = self.root.join("root/apply.yaml");
        std::fs::write(&file, yaml).unwrap();
        self.kubectl(&["apply", "-f", "/root/apply.yaml"])
            .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{yaml}"));
    }

    fn virsh(&self, args: &[&str]) -> Result<String, String> {
        try_run(
            self.command("timeout")
                .args(["60", "virsh", "-c", "qemu:///system"])
                .args(args),
        )
    }

    /// The BareMetalHost as JSON.
    fn host(&self) -> serde_json::Value {
        let out = self
            .kubectl(&["get", "baremetalhost", NODE, "-o", "json"])
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&out).unwrap()
    }
}

/// `packages/appliance.yaml` as this test builds it: its local inputs absolute, the tests' agent, the raw image
/// only, the provisioning network's DHCP on, and the deploy ramdisk `ipa` made.
fn appliance_spec(dir: &Path, ipa: &Path) -> PathBuf {
    let ws = workspace();
    let text = std::fs::read_to_string(ws.join("packages/appliance.yaml")).unwrap();
    let text = text
        .replace(
            "path: ../target/release/foothold-agent",
            &format!("path: {}", target().join("debug/foothold-agent").display()),
        )
        .replace("path: ../", &format!("path: {}/", ws.display()))
        .replace("formats: [raw, qcow2, iso]", "formats: [raw]")
        .replace(
            "    address: 172.22.0.1/24\n",
            "    address: 172.22.0.1/24\n    dhcp: {range: 172.22.0.10-172.22.0.100}\n",
        )
        .replace(
            "  metal3:\n",
            &format!(
                "  metal3:\n    deployRamdisk:\n      kernel: {{path: {k}}}\n      initramfs: {{path: {i}}}\n",
                k = ipa.join("foothold-ipa.kernel").display(),
                i = ipa.join("foothold-ipa.initramfs").display()
            ),
        );
    assert!(text.contains("dhcp: {range") && text.contains("deployRamdisk"));
    let spec = dir.join("appliance.yaml");
    std::fs::write(&spec, text).unwrap();
    spec
}

/// `foothold-build build spec --out out` with the tests' builder.
fn build(spec: &Path, out: &Path) {
    run(Command::new(target().join("debug/foothold-build"))
        .arg("build")
        .arg(spec)
        .arg("--out")
        .arg(out));
}

/// The node's domain: UEFI without Secure Boot (OVMF named, not chosen by libvirt's firmware autoselection:
/// virtualbmc sets the boot device by redefining the domain from its XML, which libvirt refuses for an
/// autoselected firmware), TCG, its disk, its NIC on the namespace's tap, its console
/// appended to a file across boots (the ramdisk's, then the installed system's).
fn domain_xml(disk: &Path, tap: &str, console: &Path) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{NODE}-{pid}</name>\n  <memory unit='MiB'>{MEMORY_MIB}</memory>\n  <vcpu>{VCPUS}</vcpu>\n\
         <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n\
         <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>\n\
         <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/{NODE}-{pid}_VARS.fd</nvram>\n\
         <boot dev='hd'/>\n  </os>\n  <features><acpi/></features>\n  <devices>\n\
         <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      <source file='{disk}'/>\n\
         <target dev='vda' bus='virtio'/>\n    </disk>\n\
         <interface type='ethernet'>\n      <mac address='{MAC}'/>\n      <target dev='{tap}' managed='no'/>\n\
         <model type='virtio'/>\n    </interface>\n\
         <serial type='file'>\n      <source path='{console}' append='on'/>\n      <target port='0'/>\n    </serial>\n\
         </devices>\n</domain>\n",
        pid = std::process::id(),
        disk = disk.display(),
        console = console.display(),
    )
}

/// Waits until `ready` says yes (its value), polling every 5 s, printing each new state `state` names; fails
/// naming the last state after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut state: impl FnMut() -> (String, Option<T>)) -> T {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let (now, done) = state();
        if now != last {
            eprintln!(
                "metal3_provisioning: {:>4} s  {what}: {now}",
                started.elapsed().as_secs()
            );
            last = now;
        }
        if let Some(v) = done {
            return v;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not within {limit:?}; the last state: {last}"
        );
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// The host's provisioning state, operational status and error, in one line.
fn host_state(h: &serde_json::Value) -> String {
    let s = &h["status"];
    format!(
        "{} / {} {}",
        s["provisioning"]["state"].as_str().unwrap_or("-"),
        s["operationalStatus"].as_str().unwrap_or("-"),
        s["errorMessage"].as_str().unwrap_or("")
    )
}

#[test]
fn a_host_is_inspected_cleaned_and_installed_to_disk_over_the_appliances_provisioning_network() {
    if !foothold_e2e::deadline::budget_allows("metal3_provisioning", Duration::from_secs(2400)) {
        return;
    }
    let deadline = Deadline::start("metal3_provisioning", Duration::from_secs(3600));
    deadline.phase("the binaries");
    build_binaries();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();

    deadline.phase("the deploy ramdisk (packages/ipa.yaml)");
    let ipa = dir.join("ipa");
    build(&workspace().join("packages/ipa.yaml"), &ipa);

    deadline.phase("the appliance's raw image, and its root taken out");
    let spec = appliance_spec(&dir, &ipa);
    let appliance = dir.join("appliance");
    build(&spec, &appliance);
    let site_dir = dir.join("site");
    std::fs::create_dir_all(&site_dir).unwrap();
    let root = site_dir.join("root");
    run(Command::new("bash")
        .current_dir(workspace())
        .arg("-c")
        .arg(". scripts/appliance-root.sh && root_extract \"$1\" \"$2\"")
        .arg("root-extract")
        .arg(appliance.join("foothold-appliance.raw"))
        .arg(&root));

    // The node's files where libvirt's QEMU user reaches them.
    let vm_dir = PathBuf::from(format!(
        "/var/lib/libvirt/images/foothold-m3-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&vm_dir);
    std::fs::create_dir_all(&vm_dir).unwrap();
    run(Command::new("chmod").arg("755").arg(&vm_dir));
    struct RemoveDir(PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _vm_dir_removed = RemoveDir(vm_dir.clone());
    let console = vm_dir.join("console.log");
    {
        let (site_dir, console) = (site_dir.clone(), console.clone());
        deadline.diagnose(
            "the site's logs (Ironic, BMO, dnsmasq, the HTTP root, vbmcd) and the node's console",
            move || {
                let mut out = String::new();
                for f in [
                    "native-site.log",
                    "ironic.log",
                    "baremetal-operator.log",
                    "foothold-dnsmasq.log",
                    "ironic-httpboot.log",
                    "vbmc/vbmcd.log",
                ] {
                    out.push_str(&format!("{f}:\n{}\n", tail_file(&site_dir.join(f), 40)));
                }
                out.push_str(&format!("console:\n{}\n", tail_file(&console, 60)));
                out
            },
        );
    }

    deadline.phase("the site: the namespace, the appliance's units, libvirtd, virtualbmc");
    let ns = Namespace::new("m3", "ens4");
    ns.add_address(&format!("{APPLIANCE}/24"));
    ns.add_address(&format!("{BMC}/24"));
    let tap = "m3tap0";
    ns.add_tap(tap);
    let log = std::fs::File::create(site_dir.join("native-site.log")).unwrap();
    let mut script = ns.command("unshare");
    script
        .current_dir(workspace())
        .args(["--mount", "--pid", "--fork", "--kill-child", "bash"])
        .arg(workspace().join("tests/fixtures/native-site.sh"))
        .arg(&root)
        .arg(tools_dir())
        .arg(site_dir.join("vbmc"))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let mut script = Running(script.spawn().unwrap());
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(site_dir.join("native-site.log")).unwrap_or_default();
        if text.contains("SITE-UP") {
            break;
        }
        if let Some(status) = script.0.try_wait().unwrap() {
            panic!("the site script exited ({status}) before it was up:\n{text}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the site was not up within 600 s:\n{text}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // unshare's child: the script, PID 1 of its namespace.
    let pid = run(Command::new("pgrep").args(["-P", &script.0.id().to_string()]))
        .trim()
        .parse()
        .unwrap();
    let site = Site {
        root: root.clone(),
        _script: script,
        pid,
    };

    deadline.phase("Ironic and BMO answer");
    wait_for(
        "Ironic's API and BMO's CRDs",
        Duration::from_secs(600),
        || {
            let ironic = try_run(site.command("curl").args([
                "-sf",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://{APPLIANCE}:6385/"),
            ]));
            let crd = site.kubectl(&["get", "crd", "baremetalhosts.metal3.io", "-o", "name"]);
            let state = format!("ironic {ironic:?}, BMO's CRD {crd:?}");
            (state, (ironic.is_ok() && crd.is_ok()).then_some(()))
        },
    );

    deadline
        .phase("the node image, trusting the appliance's CA, served on the provisioning network");
    let key = dir.join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let ca = root.join("etc/foothold/tls/cert.pem");
    let image = build_node_image_prefetching(&dir, &ca, None, "qcow2", "[]");
    let images = image.parent().unwrap().to_owned();
    let _images_server = Running(
        ns.command("python3")
            .args(["-m", "http.server", "--bind", APPLIANCE])
            .arg(IMAGES_PORT.to_string())
            .arg("--directory")
            .arg(&images)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(site_dir.join("images.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    deadline.phase("the node's domain and its IPMI BMC");
    let disk = vm_dir.join("disk.qcow2");
    run(Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&disk)
        .arg(format!("{DISK_GIB}G")));
    let xml = vm_dir.join("domain.xml");
    std::fs::write(&xml, domain_xml(&disk, tap, &console)).unwrap();
    let domain = format!("{NODE}-{}", std::process::id());
    site.virsh(&["define", xml.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{e}"));
    let password = format!("{:x}", rand::random::<u64>());
    let vbmc = |args: &[&str]| {
        try_run(
            site.command("env")
                .arg(format!("HOME={}", site_dir.join("vbmc").display()))
                .arg(tools_dir().join("vbmc"))
                .args(args),
        )
        .unwrap_or_else(|e| panic!("vbmc {args:?}: {e}"))
    };
    let port = BMC_PORT.to_string();
    vbmc(&[
        "add",
        &domain,
        "--address",
        BMC,
        "--port",
        &port,
        "--username",
        "admin",
        "--password",
        &password,
        "--libvirt-uri",
        "qemu:///system",
    ]);
    vbmc(&["start", &domain]);
    // The BMC answers as Ironic's ipmitool driver asks it.
    wait_for("the IPMI BMC", Duration::from_secs(60), || {
        let power = try_run(site.command("ipmitool").args([
            "-I", "lanplus", "-H", BMC, "-p", &port, "-U", "admin", "-P", &password, "power",
            "status",
        ]));
        let done = power
            .as_ref()
            .is_ok_and(|p| p.contains("Chassis Power is off"));
        (format!("{power:?}"), done.then_some(()))
    });

    deadline.phase("the BareMetalHost: registered, inspected, cleaned, available");
    let started = Instant::now();
    site.kubectl_apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {NODE}-bmc, namespace: default}}\n\
         stringData: {{username: admin, password: \"{password}\"}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: {NODE}-user-data, namespace: default}}\n\
         stringData:\n  userData: |\n    #cloud-config\n    ssh_authorized_keys: [\"{key}\"]\n---\n\
         apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {{name: {NODE}, namespace: default}}\n\
         spec:\n  online: true\n  bootMode: UEFI\n  bootMACAddress: \"{MAC}\"\n  \
         rootDeviceHints: {{deviceName: /dev/vda}}\n  \
         bmc: {{address: \"ipmi://{BMC}:{port}\", credentialsName: {NODE}-bmc}}\n",
        key = public.trim()
    ));
    let host = wait_for("the host", Duration::from_secs(1500), || {
        let h = site.host();
        let done = h["status"]["provisioning"]["state"] == "available";
        assert_ne!(
            h["status"]["operationalStatus"],
            "error",
            "the host failed: {}",
            host_state(&h)
        );
        (host_state(&h), done.then_some(h))
    });
    eprintln!(
        "metal3_provisioning: registered to available (inspected, cleaned) in {} s",
        started.elapsed().as_secs()
    );
    // What inspection found is the VM's: its CPUs, memory, NIC and disk.
    let hw = &host["status"]["hardware"];
    assert_eq!(hw["cpu"]["count"], VCPUS, "{hw:#}");
    let ram = hw["ramMebibytes"].as_u64().unwrap_or_default();
    assert!(
        ram > MEMORY_MIB * 9 / 10 && ram <= MEMORY_MIB,
        "ramMebibytes {ram} for a {MEMORY_MIB} MiB VM: {hw:#}"
    );
    let nics = hw["nics"].as_array().cloned().unwrap_or_default();
    let nic = nics
        .iter()
        .find(|n| n["mac"] == MAC)
        .unwrap_or_else(|| panic!("no NIC with {MAC}: {hw:#}"));
    assert!(
        nic["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("172.22.0.")),
        "the NIC's address is not the appliance's DHCP's: {nic}"
    );
    let disks = hw["storage"].as_array().cloned().unwrap_or_default();
    assert!(
        disks
            .iter()
            .any(|d| d["sizeBytes"].as_u64() == Some(DISK_GIB << 30)),
        "no {DISK_GIB} GiB disk: {hw:#}"
    );

    deadline.phase("provisioned with the node image: written to disk, booted from it");
    let started = Instant::now();
    let url = format!("http://{APPLIANCE}:{IMAGES_PORT}/foothold-node.qcow2");
    site.kubectl(&[
        "patch",
        "baremetalhost",
        NODE,
        "--type=merge",
        "-p",
        &serde_json::json!({"spec": {
            "image": {"url": url, "checksum": format!("{url}.sha256sum"), "checksumType": "sha256", "format": "qcow2"},
            "userData": {"name": format!("{NODE}-user-data"), "namespace": "default"},
        }})
        .to_string(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the host", Duration::from_secs(1500), || {
        let h = site.host();
        let done = h["status"]["provisioning"]["state"] == "provisioned";
        assert_ne!(
            h["status"]["operationalStatus"],
            "error",
            "the host failed: {}",
            host_state(&h)
        );
        (host_state(&h), done.then_some(()))
    });
    eprintln!(
        "metal3_provisioning: available to provisioned in {} s",
        started.elapsed().as_secs()
    );
    // The installed system: named by the config drive, ready.
    let marker = foothold_e2e::wait_for_marker(&console, Duration::from_secs(900));
    assert!(
        marker.contains(&format!("host={NODE} ")),
        "the node is not named as its BareMetalHost (the config drive): {marker}"
    );
    eprintln!(
        "metal3_provisioning: booted from disk and ready {} s after the image was set: {marker}",
        started.elapsed().as_secs()
    );
    // Its address is the appliance's DHCP's, and the key of the config drive's user data logs in.
    let leases =
        std::fs::read_to_string(root.join("var/lib/foothold-dnsmasq/leases")).unwrap_or_default();
    let address = leases
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(MAC))
        .and_then(|l| l.split(' ').nth(2))
        .unwrap_or_else(|| panic!("no lease for {MAC}:\n{leases}"))
        .to_owned();
    let hostname = run(ns
        .command("ssh")
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=30",
            "-i",
        ])
        .arg(&key)
        .arg(format!("foothold@{address}"))
        .args(["hostname; findmnt -no SOURCE /"]));
    assert!(hostname.starts_with(&format!("{NODE}\n")), "{hostname}");
    assert!(
        hostname.contains("/dev/vda"),
        "the root is not on the disk: {hostname}"
    );
}
