//! A site CA made before the appliance, as an operator makes one (OpenSSL), so that node images can be built
//! first: its certificate goes into the spec (`components.siteCa`), its key onto a USB stick labelled
//! FOOTHOLD-CA, plugged in at the first boot.

use std::path::{Path, PathBuf};
use std::process::Command;

use foothold_e2e::run;

use super::Appliance;

pub(super) struct OperatorCa {
    /// The CA's certificate, which the spec names.
    pub(super) cert: PathBuf,
    key: PathBuf,
    /// A raw image of a FAT file system labelled FOOTHOLD-CA holding `ca-key.pem`.
    pub(super) stick: PathBuf,
}

impl OperatorCa {
    pub(super) fn new(dir: &Path) -> OperatorCa {
        let ca = dir.join("operator-ca");
        std::fs::create_dir_all(&ca).unwrap();
        let openssl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(&ca));
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            "ca-key.pem",
        ]);
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca-key.pem",
            "-out",
            "ca.pem",
            "-days",
            "3650",
            "-subj",
            "/CN=Operator site CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE,pathlen:0",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        let stick = dir.join("foothold-ca-stick.img");
        run(Command::new("mkfs.vfat")
            .args(["-C", "-n", "FOOTHOLD-CA"])
            .arg(&stick)
            .arg("2048"));
        run(Command::new("mcopy")
            .arg("-i")
            .arg(&stick)
            .arg(ca.join("ca-key.pem"))
            .arg("::ca-key.pem"));
        OperatorCa {
            cert: ca.join("ca.pem"),
            key: ca.join("ca-key.pem"),
            stick,
        }
    }

    /// The appliance took the CA's key from the stick at its first boot and keeps it root's alone; its agent
    /// serves a certificate of this CA, which a client trusting only this CA accepts.
    pub(super) fn is_the_appliances(&self, a: &Appliance, dir: &Path) {
        // The CA the agent sends with its certificate (saved by serves_its_first_boot_certificate).
        let fingerprint = |pem: &Path| {
            run(Command::new("openssl")
                .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
                .arg(pem))
        };
        assert_eq!(
            fingerprint(&dir.join("served-site-ca.pem")),
            fingerprint(&self.cert),
            "the agent's chain ends in another CA than the one of the spec"
        );
        let ready = run(Command::new("curl")
            .args(["-fsS", "--max-time", "30", "--cacert"])
            .arg(&self.cert)
            .arg(format!("https://127.0.0.1:{}/readyz", a.agent_port)));
        let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
        assert_eq!(ready["http"], "ok", "{ready}");
        let said = a.ssh("sudo stat -c '%U %a' /etc/foothold/tls/ca-key.pem");
        assert_eq!(said.trim(), "root 600", "{said}");
        let public = |text: String| text.trim().to_owned();
        assert_eq!(
            public(a.ssh("sudo openssl pkey -pubout -in /etc/foothold/tls/ca-key.pem")),
            public(run(Command::new("openssl")
                .args(["pkey", "-pubout", "-in"])
                .arg(&self.key))),
            "the appliance's CA key is not the stick's"
        );
        let journal = a.ssh("sudo journalctl -b -o cat -u foothold-pki");
        assert!(
            journal.contains("its key taken from /tmp/"),
            "foothold-pki did not say it took the key from the stick:\n{journal}"
        );
    }
}
