//! The qemu command lines, the KVM probe's verdicts and a VM's life, with fake qemu binaries where a real boot
//! is not the point.

use super::*;

fn args(image: &str, media: Media) -> Vec<String> {
    let o = RunOptions {
        media,
        bios: true,
        forwards: vec![(8080, 5000)],
        guest_forwards: vec![GuestForward::at_host(8000, 39987)],
        relay: Some(PathBuf::from("/usr/bin/foothold-build")),
        memory_mib: 512,
        cpus: 2,
        snapshot: true,
        ..RunOptions::new(PathBuf::from(image))
    };
    command(&o, Accel::Tcg, Path::new("/nonexistent"))
        .unwrap()
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn an_iso_goes_in_a_cd_drive_and_anything_else_on_a_disk_by_default() {
    assert_eq!(Media::for_image(Path::new("a/site.iso")), Media::Cdrom);
    assert_eq!(Media::for_image(Path::new("a/site.qcow2")), Media::Disk);
    assert_eq!(Media::for_image(Path::new("a/site.raw")), Media::Disk);
    assert_eq!(Media::for_image(Path::new("a/site")), Media::Disk);
}

#[test]
fn more_sticks_are_read_only_usb_disks_beside_any_medium() {
    for media in [Media::Disk, Media::Usb] {
        let o = RunOptions {
            media,
            bios: true,
            sticks: vec![PathBuf::from("/k/ca,key.img"), PathBuf::from("/k/b.img")],
            ..RunOptions::new(PathBuf::from("/i/site.raw"))
        };
        let a: Vec<String> = command(&o, Accel::Tcg, Path::new("/nonexistent"))
            .unwrap()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            a.iter().filter(|a| *a == "qemu-xhci,id=xhci").count(),
            1,
            "{a:?}"
        );
        assert!(
            a.contains(&"file=/k/ca,,key.img,format=raw,if=none,id=extra0,readonly=on".to_owned())
        );
        assert!(a.contains(&"file=/k/b.img,format=raw,if=none,id=extra1,readonly=on".to_owned()));
        assert!(
            a.contains(&"usb-storage,bus=xhci.0,drive=extra1".to_owned()),
            "{a:?}"
        );
    }
}

#[test]
fn each_medium_attaches_the_image_its_own_way() {
    let disk = args("/i/site.qcow2", Media::Disk);
    assert!(disk.contains(&"file=/i/site.qcow2,format=qcow2,if=virtio".to_owned()));
    let cd = args("/i/site.iso", Media::Cdrom);
    assert!(cd.contains(&"file=/i/site.iso,format=raw,media=cdrom,readonly=on".to_owned()));
    let usb = args("/i/a,b.iso", Media::Usb);
    assert!(usb.contains(&"file=/i/a,,b.iso,format=raw,if=none,id=stick".to_owned()));
    let i = usb
        .iter()
        .position(|a| a.starts_with("usb-storage,"))
        .unwrap();
    assert_eq!(usb[i - 1], "-device");
    assert!(usb[i].contains("drive=stick") && usb[i].contains("bootindex=0"));
    assert!(usb.contains(&"qemu-xhci,id=xhci".to_owned()));
    for a in [&disk, &cd] {
        assert!(!a.iter().any(|a| a.contains("usb")), "{a:?}");
    }
    // BIOS: no pflash; -snapshot and the forward as asked; TCG with its CPU model.
    assert!(!usb.iter().any(|a| a.contains("pflash")));
    assert!(usb.contains(&"-snapshot".to_owned()));
    assert!(usb
        .iter()
        .any(|a| a.contains("hostfwd=tcp:127.0.0.1:8080-:5000")));
    // The guest's connections to 10.0.2.100:8000 reach this host's 127.0.0.1:39987 through the relay.
    assert!(usb.iter().any(|a| a.contains(
        ",guestfwd=tcp:10.0.2.100:8000-cmd:/usr/bin/foothold-build relay 127.0.0.1:39987"
    )));
    assert!(usb
        .windows(4)
        .any(|w| w == ["-accel", "tcg", "-cpu", "max"]));
    // Its CPUs on one socket (the TSC stays the guest's clock).
    assert!(usb
        .windows(2)
        .any(|w| w == ["-smp", "2,sockets=1,cores=2,threads=1"]));
    // The console on the terminal keeps a copy for the watcher.
    let i = usb.iter().position(|a| a.starts_with("stdio,")).unwrap();
    assert_eq!(
        usb[i],
        "stdio,id=console,signal=on,logfile=/nonexistent/console.log"
    );
    assert_eq!(usb[i + 1..i + 3], ["-serial", "chardev:console"]);
}

#[test]
fn the_provisioning_nic_is_in_slot_4_on_its_tap_and_bad_names_are_refused() {
    let with = |tap: &str, mac: Option<&str>| {
        let o = RunOptions {
            provisioning: Some(ProvisioningNic {
                tap: tap.into(),
                mac: mac.map(Into::into),
            }),
            bios: true,
            ..RunOptions::new(PathBuf::from("/i/site.raw"))
        };
        command(&o, Accel::Tcg, Path::new("/nonexistent")).map(|c| {
            c.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
    };
    let a = with("fh-prov0", Some("52:54:00:fd:00:0a")).unwrap();
    let at = |s: &str| {
        a.iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s}: {a:?}"))
    };
    // The root port with hot-plug slot 4 (the guest's `ens4`), visible only with native PCIe hot-plug.
    let port = at("pcie-root-port,id=prov,chassis=4,slot=4,bus=pcie.0,addr=0x4");
    assert_eq!(a[port - 1], "-device");
    assert_eq!(
        a[at("ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off") - 1],
        "-global"
    );
    at("tap,id=p0,ifname=fh-prov0,script=no,downscript=no");
    at("virtio-net-pci,netdev=p0,bus=prov,mac=52:54:00:fd:00:0a");
    // The user network stays the first NIC.
    assert!(at("virtio-net-pci,netdev=n0") < port);
    // Without one, none of it.
    let plain = args("/i/site.raw", Media::Disk);
    assert!(!plain
        .iter()
        .any(|x| x.contains("prov") || x.contains("hotplug")));
    // What would break qemu's option syntax, or is no interface name or MAC, is refused with the reason.
    for (tap, mac, says) in [
        ("fh,prov", None, "not an interface name"),
        ("a-name-of-16-chr", None, "not an interface name"),
        ("", None, "not an interface name"),
        ("fh0", Some("52:54:00:fd:00"), "not a MAC address"),
        ("fh0", Some("52:54:00:fd:00:0a,x=1"), "not a MAC address"),
    ] {
        let e = with(tap, mac).unwrap_err().to_string();
        assert!(e.contains(says), "{tap:?} {mac:?}: {e}");
    }
}

#[test]
fn accel_choices_parse_and_name_the_alternatives() {
    assert_eq!("auto".parse(), Ok(AccelChoice::Auto));
    assert_eq!("kvm".parse(), Ok(AccelChoice::Kvm));
    assert_eq!("tcg".parse(), Ok(AccelChoice::Tcg));
    assert_eq!(
        "hvf".parse::<AccelChoice>(),
        Err("\"hvf\" is not one of auto, kvm, tcg".to_owned())
    );
}

/// A copy of tests/fixtures/fake-qemu.sh with its behaviour, and the calls it will log.
struct FakeQemu {
    dir: tempfile::TempDir,
}

impl FakeQemu {
    fn new(probe: &str, boot: &str) -> FakeQemu {
        FakeQemu::with_tcg(probe, boot, "marker")
    }

    fn with_tcg(probe: &str, boot: &str, tcg: &str) -> FakeQemu {
        let dir = tempfile::tempdir().unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-qemu.sh");
        std::fs::copy(script, dir.path().join("qemu")).unwrap();
        std::fs::write(
            dir.path().join("behaviour"),
            format!("PROBE={probe}\nBOOT={boot}\nTCG={tcg}\n"),
        )
        .unwrap();
        FakeQemu { dir }
    }

    fn options(&self, bios: bool, accel: AccelChoice) -> RunOptions {
        RunOptions {
            bios,
            serial_log: Some(self.dir.path().join("console.log")),
            accel,
            qemu: self.dir.path().join("qemu"),
            kvm_first_output: Duration::from_secs(2),
            ..RunOptions::new(self.dir.path().join("site.raw"))
        }
    }

    fn calls(&self) -> String {
        read_lossy(&self.dir.path().join("calls.log"))
    }
}

#[test]
fn auto_boots_again_under_tcg_when_kvm_fails_a_boot_its_probe_passed() {
    for (boot, why) in [
        ("internal-error", "KVM internal error. Suberror: 1"),
        ("silent", "no console output within 2s"),
        (
            "exit",
            "before the guest printed anything: qemu-system-x86_64: error: failed to set MSR",
        ),
    ] {
        for bios in [false, true] {
            let fake = FakeQemu::new("pass", boot);
            let mut vm = Vm::start(fake.options(bios, AccelChoice::Auto)).unwrap();
            assert_eq!(vm.accel(), Accel::Kvm, "{boot}: the probe passed");
            let line = vm.wait_ready(Duration::from_secs(30)).unwrap();
            assert_eq!(line, "FOOTHOLD-READY host=fake accel=tcg", "{boot}");
            assert_eq!(vm.accel(), Accel::Tcg, "{boot}");
            let fallback = vm.fallback().unwrap();
            assert!(fallback.contains(why), "{boot}: {fallback}");
            assert_eq!(fake.calls(), "kvm probe\nkvm boot\ntcg boot\n", "{boot}");
            drop(vm);
            // The next boot of that firmware in this process goes straight to TCG.
            let mut vm = Vm::start(fake.options(bios, AccelChoice::Auto)).unwrap();
            assert_eq!(vm.accel(), Accel::Tcg, "{boot}");
            vm.wait_ready(Duration::from_secs(30)).unwrap();
            assert_eq!(
                fake.calls(),
                "kvm probe\nkvm boot\ntcg boot\ntcg boot\n",
                "{boot}"
            );
        }
    }
}

#[test]
fn auto_keeps_kvm_where_it_works_and_skips_it_where_the_probe_fails() {
    for bios in [false, true] {
        let fake = FakeQemu::new("pass", "works");
        let mut vm = Vm::start(fake.options(bios, AccelChoice::Auto)).unwrap();
        let line = vm.wait_ready(Duration::from_secs(30)).unwrap();
        assert_eq!(line, "FOOTHOLD-READY host=fake accel=kvm");
        assert_eq!((vm.accel(), vm.fallback()), (Accel::Kvm, None));
        assert_eq!(fake.calls(), "kvm probe\nkvm boot\n");

        let fake = FakeQemu::new("internal-error", "works");
        let mut vm = Vm::start(fake.options(bios, AccelChoice::Auto)).unwrap();
        vm.wait_ready(Duration::from_secs(30)).unwrap();
        assert_eq!((vm.accel(), vm.fallback()), (Accel::Tcg, None));
        assert_eq!(fake.calls(), "kvm probe\ntcg boot\n");
    }
}

#[test]
fn a_forced_accelerator_is_used_as_it_is_and_a_failing_kvm_names_the_override() {
    let fake = FakeQemu::new("pass", "internal-error");
    let mut vm = Vm::start(fake.options(false, AccelChoice::Kvm)).unwrap();
    let err = format!("{:#}", vm.wait_ready(Duration::from_secs(30)).unwrap_err());
    assert!(
        err.contains("KVM internal error") && err.contains("--accel tcg"),
        "{err}"
    );
    assert_eq!(fake.calls(), "kvm boot\n");

    let fake = FakeQemu::new("pass", "works");
    let mut vm = Vm::start(fake.options(false, AccelChoice::Tcg)).unwrap();
    vm.wait_ready(Duration::from_secs(30)).unwrap();
    assert_eq!(fake.calls(), "tcg boot\n");
}

#[test]
fn a_console_on_the_terminal_is_watched_through_its_copy() {
    let fake = FakeQemu::new("pass", "internal-error");
    let mut vm = Vm::start(RunOptions {
        serial_log: None,
        ..fake.options(false, AccelChoice::Auto)
    })
    .unwrap();
    // The stand-in under TCG prints the marker to the terminal and to its copy, then quits.
    assert!(vm.wait().unwrap().success());
    assert_eq!(vm.accel(), Accel::Tcg);
    assert!(read_lossy(vm.console()).contains("FOOTHOLD-READY host=fake accel=tcg"));
    assert_eq!(fake.calls(), "kvm probe\nkvm boot\ntcg boot\n");
}

#[test]
fn a_guest_kernel_panic_under_tcg_boots_again_once_and_a_second_ends_the_boot_at_once() {
    // After KVM failed the boot, or under a forced TCG: the first panic costs one more boot.
    for (accel, calls) in [
        (
            AccelChoice::Auto,
            "kvm probe\nkvm boot\ntcg boot\ntcg boot\n",
        ),
        (AccelChoice::Tcg, "tcg boot\ntcg boot\n"),
    ] {
        let fake = FakeQemu::with_tcg("pass", "internal-error", "panic-once");
        let mut vm = Vm::start(fake.options(false, accel)).unwrap();
        let line = vm.wait_ready(Duration::from_secs(30)).unwrap();
        assert_eq!(line, "FOOTHOLD-READY host=fake accel=tcg");
        let panic = vm.tcg_panic().expect("the panic that made it boot again");
        assert_eq!(
            panic.summary,
            "Oops: general protection fault: 0000 [#1] PREEMPT SMP NOPTI | RIP: 0010:enqueue_timer+0xa5/0x100 \
             | Kernel panic - not syncing: Fatal exception in interrupt (boot 1)"
        );
        assert_eq!(fake.calls(), calls);
    }
    // Panicking every time: the second panic is the error, long before the timeout, naming both.
    let fake = FakeQemu::with_tcg("pass", "works", "panic");
    let mut vm = Vm::start(fake.options(false, AccelChoice::Tcg)).unwrap();
    let started = Instant::now();
    let err = format!("{:#}", vm.wait_ready(Duration::from_secs(60)).unwrap_err());
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
    assert!(
        err.starts_with(
            "the guest kernel panicked under TCG (and in the boot before this one: Oops:"
        ) && err.contains("Fatal exception in interrupt (boot 1))")
            && err.contains("Fatal exception in interrupt (boot 2)\n")
            && err.contains("RIP: 0010:enqueue_timer"),
        "{err}"
    );
    assert_eq!(fake.calls(), "tcg boot\ntcg boot\n");
}

#[test]
fn a_guest_kernel_panic_under_kvm_ends_the_boot_without_another() {
    let fake = FakeQemu::new("pass", "panic");
    let mut vm = Vm::start(fake.options(true, AccelChoice::Auto)).unwrap();
    let err = format!("{:#}", vm.wait_ready(Duration::from_secs(60)).unwrap_err());
    assert!(
        err.starts_with("the guest kernel panicked under KVM: Oops: general protection fault"),
        "{err}"
    );
    assert_eq!(fake.calls(), "kvm probe\nkvm boot\n");
}
