//! The provisioning network the appliance serves (`network.provisioning.dhcp`), with real parts: Debian's dnsmasq
//! runs the configuration `foothold-build` renders for the appliance (only its file paths moved into the test's
//! directory), on a bridge inside a network namespace this test makes, with the address the spec gives the
//! appliance. A VM (qemu under TCG, its NIC on a tap on that bridge) boots from the network twice: under BIOS
//! (SeaBIOS's PXE) and under UEFI (OVMF's). Each time its firmware gets a lease from the range and iPXE over
//! TFTP (the UNDI build, then the SNP-only one); iPXE asks again as iPXE and is handed the boot script URL on
//! the appliance's address, which a test HTTP server in the namespace serves: the script has iPXE fetch a
//! second file named by its own MAC address, which is how the test knows the chain ran to its end. dnsmasq's
//! lease file then names the VM's MAC with an address from the range. Nothing leaves the namespace.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use foothold_e2e::netns::{Namespace, Running};
use foothold_e2e::{run, tools_dir, Deadline};
use foothold_image_builder::dhcp;
use foothold_image_builder::spec::{Dhcp, StaticInterface};

const APPLIANCE: &str = "172.22.0.1";

/// The appliance's dnsmasq configuration as the builder renders it for `network.provisioning`, with its lease
/// file and TFTP root moved to `dir` and `ipxe`.
fn configuration(dir: &Path, ipxe: &Path) -> PathBuf {
    let d = Dhcp {
        range: "172.22.0.10-172.22.0.100".into(),
        lease_time: None,
    };
    let p = StaticInterface {
        interface: "br0".into(),
        address: format!("{APPLIANCE}/24"),
        dhcp: Some(d.clone()),
    };
    let files = dhcp::render(&p, &d);
    let conf = &files.iter().find(|f| f.0 == dhcp::CONF).unwrap().1;
    let conf = conf
        .replace(dhcp::LEASES, &dir.join("leases").display().to_string())
        .replace(
            &format!("tftp-root={}", dhcp::TFTP_ROOT),
            &format!("tftp-root={}", ipxe.display()),
        );
    let path = dir.join("dnsmasq.conf");
    std::fs::write(&path, conf).unwrap();
    path
}

/// Waits until `file` holds `what`, polling, while `server` runs; the file's text.
fn wait_for_text(file: &Path, what: &str, limit: Duration, server: &mut Running) -> String {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!(
                "dnsmasq exited ({status}) before {what:?} was in {}",
                file.display()
            );
        }
        assert!(
            started.elapsed() < limit,
            "{what:?} not in {} within {limit:?}; it holds:\n{text}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn compute_nodes_get_a_lease_and_ipxe_under_bios_and_uefi_from_the_appliances_dnsmasq() {
    if !foothold_e2e::deadline::budget_allows("provisioning_network", Duration::from_secs(600)) {
        return;
    }
    let deadline = Deadline::start("provisioning_network", Duration::from_secs(1200));
    deadline.phase("dnsmasq and the boot script's server in a namespace");
    // dnsmasq drops to its own user, which must reach its lease file and TFTP root: a directory under /tmp,
    // not under root's home.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    {
        let dir = dir.clone();
        deadline.diagnose(
            "dnsmasq's log, the HTTP server's log, the leases",
            move || {
                ["dnsmasq.log", "http.log", "leases"]
                    .iter()
                    .map(|f| {
                        format!(
                            "{f}:\n{}\n",
                            foothold_e2e::deadline::tail_file(&dir.join(f), 40)
                        )
                    })
                    .collect()
            },
        );
    }
    run(Command::new("chmod").arg("1777").arg(&dir));
    let tools = tools_dir().join("../ipxe");
    let ipxe = dir.join("ipxe");
    std::fs::create_dir_all(&ipxe).unwrap();
    for f in ["undionly.kpxe", "snponly.efi"] {
        std::fs::copy(tools.join(f), ipxe.join(f)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/install-test-tools.sh unpacks Debian's iPXE builds there)",
                tools.join(f).display()
            )
        });
    }
    let conf = configuration(&dir, &ipxe);
    let ns = Namespace::new("pxe", "br0");
    ns.add_tap("tap0");
    // The unit's check, then the unit's command.
    run(Command::new("dnsmasq")
        .arg("--test")
        .arg(format!("--conf-file={}", conf.display())));
    let mut dnsmasq = Running(
        ns.command("dnsmasq")
            .arg("--keep-in-foreground")
            .arg(format!(
                "--log-facility={}",
                dir.join("dnsmasq.log").display()
            ))
            .arg(format!("--conf-file={}", conf.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // dnsmasq came up before the provisioning NIC had its address (the appliance boots whatever that NIC
    // does): it serves once the address is there.
    wait_for_text(
        &dir.join("dnsmasq.log"),
        "DHCP, IP range 172.22.0.10 -- 172.22.0.100",
        Duration::from_secs(30),
        &mut dnsmasq,
    );
    ns.add_address(&format!("{APPLIANCE}/24"));
    // Ironic's HTTP root as far as iPXE goes: boot.ipxe, which fetches a file named by the VM's MAC.
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("node")).unwrap();
    std::fs::write(
        www.join("boot.ipxe"),
        format!(
            "#!ipxe\nchain http://{APPLIANCE}:{}/node/${{net0/mac:hexhyp}}.ipxe\n",
            dhcp::BOOT_SCRIPT_PORT
        ),
    )
    .unwrap();
    let _http = Running(
        ns.command("python3")
            .args(["-m", "http.server", "--bind", APPLIANCE])
            .arg(dhcp::BOOT_SCRIPT_PORT.to_string())
            .arg("--directory")
            .arg(&www)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("http.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    // Under BIOS the NIC has qemu's option ROM, which is iPXE: it asks as iPXE at once and is given the script,
    // no TFTP (a server's own PXE ROM gets undionly.kpxe first: the rendered configuration's unit test covers
    // that rule). Under UEFI the NIC has no option ROM, as a server's: OVMF's own PXE asks as UEFI and fetches
    // snponly.efi over TFTP, which drives the NIC through OVMF's driver and asks again as iPXE.
    for (firmware, mac, tftp) in [
        ("BIOS", "52:54:00:22:00:0b", None),
        ("UEFI", "52:54:00:22:00:0e", Some("snponly.efi")),
    ] {
        let hexhyp = mac.replace(':', "-");
        std::fs::write(
            www.join(format!("node/{hexhyp}.ipxe")),
            "#!ipxe\necho foothold: the boot script ran\nexit 0\n",
        )
        .unwrap();
        deadline.phase(&format!("a network boot under {firmware}"));
        let started = Instant::now();
        let mut qemu = ns.command("qemu-system-x86_64");
        qemu.args([
            "-accel",
            "tcg",
            "-m",
            "256",
            "-display",
            "none",
            "-nodefaults",
        ])
        .arg("-serial")
        .arg(format!(
            "file:{}",
            dir.join(format!("console-{firmware}.log")).display()
        ))
        .args(["-netdev", "tap,id=n,ifname=tap0,script=no,downscript=no"])
        .arg("-device")
        .arg(format!(
            "virtio-net-pci,netdev=n,mac={mac},bootindex=1{}",
            if tftp.is_some() { ",romfile=" } else { "" }
        ));
        if firmware == "UEFI" {
            let vars = dir.join("OVMF_VARS.fd");
            std::fs::copy("/usr/share/OVMF/OVMF_VARS_4M.fd", &vars).unwrap();
            qemu.args(["-machine", "q35", "-drive"])
                .arg("if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd")
                .arg("-drive")
                .arg(format!("if=pflash,format=raw,file={}", vars.display()));
        }
        let _vm = Running(
            qemu.stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("qemu-{firmware}.log"))).unwrap())
                .spawn()
                .unwrap(),
        );
        // iPXE ran the boot script and asked for the file its own MAC names.
        let http = wait_for_text(
            &dir.join("http.log"),
            &format!("GET /node/{hexhyp}.ipxe "),
            Duration::from_secs(480),
            &mut dnsmasq,
        );
        assert!(http.contains("GET /boot.ipxe "), "{http}");
        eprintln!(
            "provisioning_network: {firmware}: a lease, iPXE, the boot script and the file it named in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        let log = std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap();
        if let Some(tftp) = tftp {
            let sent = format!("sent {} to ", ipxe.join(tftp).display());
            assert!(log.contains(&sent), "{sent:?} not in dnsmasq's log:\n{log}");
        }
        let leases = std::fs::read_to_string(dir.join("leases")).unwrap_or_default();
        let lease = leases
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(mac))
            .unwrap_or_else(|| panic!("no lease for {mac}:\n{leases}"));
        let address: std::net::Ipv4Addr = lease.split(' ').nth(2).unwrap().parse().unwrap();
        let range =
            std::net::Ipv4Addr::new(172, 22, 0, 10)..=std::net::Ipv4Addr::new(172, 22, 0, 100);
        assert!(range.contains(&address), "{lease}");
    }

    deadline.phase("one MAC, two client ids: one address");
    // A host is its NIC's MAC: the deploy ramdisk and the OS installed after it each send a DHCP client id of
    // their own (networkd's, from their machine ids), and must get the address inspection recorded. Two
    // clients (busybox's udhcpc) on one MAC, each with another client id, in a namespace of their own on the
    // bridge.
    let node = ns.dhcp_client("pxenode", "vb0", "52:54:00:fd:00:01");
    let leased = |client_id: &str| {
        node.lease(Some(client_id))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let ramdisk = leased("ff00000001000102030405");
    let installed = leased("ff00000002000102030405");
    assert_eq!(
        ramdisk, installed,
        "a second client id on the same MAC got another address"
    );
    let leases = std::fs::read_to_string(dir.join("leases")).unwrap_or_default();
    assert_eq!(
        leases
            .lines()
            .filter(|l| l.contains(" 52:54:00:fd:00:01 "))
            .count(),
        1,
        "{leases}"
    );
}
