//! `install-software`: a `Software`'s packages (`packages.json`, written by the BPA's Software reconciler) put on
//! the hosts of their groups over SSH. Each host downloads each of its packages itself from the agent's file
//! server (apt's `apt-helper`, checking the sha256 the manifest records and the site CA apt is configured with),
//! keeps it by its sha256, and installs it: a Debian package through apt (its dependencies from the agent's apt
//! repository), anything else as an executable in `/usr/local/bin/<name>`. Each step is skipped when its result
//! is already there, so a second run over a half-installed cluster converges. One line per host and package
//! reports what happened; a failure names the host, the package and the output's tail.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;
use serde::Deserialize;

use crate::digest::{Algorithm, Digest};
use crate::installer::inventory::{Host, Inventory};
use crate::installer::remove;
use crate::installer::rollout::{roll_out, Outcome, Run};
use crate::installer::ssh::{Connection, KnownHosts, Target};

/// `packages.json`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub owner: String,
    pub cluster: String,
    pub packages: Vec<Package>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    /// Inventory groups: `kube_control_plane`, `kube_node`.
    pub groups: Vec<String>,
    pub url: String,
    pub sha256: String,
    /// Drain the host before this package changes on it (and uncordon it after).
    #[serde(default)]
    pub drain: bool,
}

impl Manifest {
    /// Parses and checks every value that will reach a host's shell: names, versions, URLs and digests are
    /// refused unless they are plainly what they claim to be.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for (i, p) in m.packages.iter().enumerate() {
            let f = format!("packages[{i}] ({})", p.name);
            let plain = |s: &str| {
                !s.is_empty()
                    && s.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_' | b'~')
                    })
            };
            if !plain(&p.name) || p.name.starts_with(['-', '.']) {
                return Err(format!("{f}: name: not a package name"));
            }
            if let Some(v) = &p.version {
                if !plain(v) {
                    return Err(format!("{f}: version {v:?}: not a version"));
                }
            }
            if Digest::from_parts(Algorithm::Sha256, &p.sha256).is_none() {
                return Err(format!(
                    "{f}: sha256 {:?}: not 64 lowercase hex digits",
                    p.sha256
                ));
            }
            let url_ok = crate::installer::release::plain_url(&p.url);
            if !url_ok {
                return Err(format!("{f}: url {:?}: not a plain http(s) URL", p.url));
            }
            if p.groups.is_empty() {
                return Err(format!("{f}: groups: empty"));
            }
            for g in &p.groups {
                if g != "kube_control_plane" && g != "kube_node" {
                    return Err(format!(
                        "{f}: groups: {g:?} is not kube_control_plane or kube_node"
                    ));
                }
            }
        }
        Ok(m)
    }
}

/// Where a host keeps downloaded packages, by sha256.
pub const CACHE: &str = "/var/lib/foothold/packages";
/// The line a host's script prints on success: `FOOTHOLD-PACKAGE <what was done>`.
pub const DONE: &str = "FOOTHOLD-PACKAGE";

/// What [`script`] says, in check mode, of a package the host does not have yet (at that version or content).
pub const NEEDED: &str = "needed";

/// The shell script (run by `sh -s` as root) that puts `p` on a host. Every value in it was checked by
/// [`Manifest::parse`]. `run` names this installer run (letters and digits): apt's index is updated once per
/// host and run, by the first package that needs it. With `check`, it downloads the package but changes
/// nothing else: it says whether it is already installed or [`NEEDED`].
pub fn script(p: &Package, run: &str, check: bool) -> String {
    let (name, sha, url) = (&p.name, &p.sha256, &p.url);
    let check = if check {
        format!("echo \"{DONE} {NEEDED}\"\n  exit 0\n  ")
    } else {
        String::new()
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"set -eu
export DEBIAN_FRONTEND=noninteractive
dir={CACHE}
mkdir -p "$dir"
f="$dir/{sha}"
if ! echo "{sha}  $f" | sha256sum -c --status 2>/dev/null; then
  rm -f "$f.part"
  /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file '{url}' "$f.part" 'SHA256:{sha}' >&2
  sync "$f.part"
  mv "$f.part" "$f"
fi
if pkg=$(dpkg-deb --field "$f" Package 2>/dev/null); then
  ver=$(dpkg-deb --field "$f" Version)
  if [ "$(dpkg-query -W -f '${{Status}} ${{Version}}' "$pkg" 2>/dev/null)" = "install ok installed $ver" ]; then
    echo "{DONE} deb $pkg $ver already installed"
    exit 0
  fi
  {check}ln -sf "$f" "$dir/$pkg.deb"
  if [ ! -e "/run/foothold-apt-updated-{run}" ]; then
    apt-get -q update >&2
    touch "/run/foothold-apt-updated-{run}"
  fi
  apt-get -q install -y --no-install-recommends "$dir/$pkg.deb" >&2
  echo "{DONE} deb $pkg $ver installed"
else
  target=/usr/local/bin/{name}
  if echo "{sha}  $target" | sha256sum -c --status 2>/dev/null; then
    echo "{DONE} binary $target already installed"
    exit 0
  fi
  {check}mkdir -p /usr/local/bin
  cp "$f" "$target.part"
  chmod 755 "$target.part"
  sync "$target.part"
  mv "$target.part" "$target"
  echo "{DONE} binary $target installed"
fi
"#
    );
    s
}

/// The packages (indices into `m.packages`, in manifest order) that go to host `name`: those of its groups.
pub fn packages_for(inv: &Inventory, m: &Manifest, name: &str) -> Vec<usize> {
    let has = |group: &[String]| group.iter().any(|n| n == name);
    (0..m.packages.len())
        .filter(|&i| {
            m.packages[i].groups.iter().any(|g| match g.as_str() {
                "kube_control_plane" => has(&inv.control_plane),
                _ => has(&inv.nodes),
            })
        })
        .collect()
}

/// How long one package may take on one host: a download and an apt install on a slow node.
const PER_PACKAGE: Duration = Duration::from_secs(20 * 60);
const CONNECT: Duration = Duration::from_secs(60);

/// What a drain before a package needs: the workload cluster (the Job's `KUBECONFIG`) and how long a drain may
/// wait for its pods (PodDisruptionBudgets permitting).
pub struct Drainer {
    pub cluster: kube::Client,
    pub timeout: Duration,
}

/// What [`Outcome::package`] says for the steps around a host's packages: its drain and its uncordon.
pub const DRAIN: &str = "(drain)";
pub const UNCORDON: &str = "(uncordon)";

/// Puts every package on the hosts of its groups: `at_once` hosts at a time (the Software's `maxUnavailable`), in
/// inventory order, each host's packages one after another. The first host with a failed package (or that
/// cannot be reached) stops the rollout: hosts not yet started are skipped, those under way finish. A host
/// that needs a package marked `drain` is drained first and uncordoned after ([`on_host`]); `drainer` is
/// `None` when no package asks for one.
pub async fn install(
    inv: &Inventory,
    m: &Manifest,
    (key, default_user, known): (Arc<PrivateKey>, &str, &KnownHosts),
    drainer: Option<&Drainer>,
    at_once: usize,
) -> Run {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let hosts: Vec<(&Host, Vec<usize>)> = inv
        .members()
        .into_iter()
        .map(|h| (h, packages_for(inv, m, &h.name)))
        .filter(|(_, mine)| !mine.is_empty())
        .collect();
    roll_out(&hosts, at_once, |host, mine| {
        let login = (key.clone(), default_user, known);
        on_host(host, mine, m, login, drainer, &run)
    })
    .await
}

/// Host `host`'s packages `mine` (indices into `m.packages`), one after another over one SSH connection; every
/// package fails with the connection's error if the host cannot be reached. If a package marked `drain` is not
/// there yet (the script's check mode, which only downloads), the host's Node is drained first and, once every
/// package is in, uncordoned; after a failure it is left cordoned, and the report says so. The first failure
/// ends the host's run.
async fn on_host(
    host: &Host,
    mine: &[usize],
    m: &Manifest,
    (key, default_user, known): (Arc<PrivateKey>, &str, &KnownHosts),
    drainer: Option<&Drainer>,
    run: &str,
) -> Vec<Outcome> {
    let target = Target::of(host, default_user);
    let step = |package: &str, result| Outcome {
        host: host.name.clone(),
        package: package.to_owned(),
        result,
    };
    let c = match Connection::open(&target, key, known, CONNECT).await {
        Ok(c) => c,
        Err(e) => {
            return mine
                .iter()
                .map(|&i| step(&m.packages[i].name, Err(e.to_string())))
                .collect()
        }
    };
    let shell = target.root_shell();
    let mut outcomes = Vec::new();
    let mut drain_needed = false;
    for &i in mine.iter().filter(|&&i| m.packages[i].drain) {
        match put(&c, shell, &m.packages[i], run, true).await {
            Ok(said) => drain_needed |= said == NEEDED,
            Err(e) => outcomes.push(step(&m.packages[i].name, Err(e))),
        }
    }
    let drained = match (outcomes.is_empty() && drain_needed, drainer) {
        (false, _) => false,
        (true, None) => {
            outcomes.push(step(DRAIN, Err("a package asks for a drain, but the installer was given no workload cluster (KUBECONFIG)".into())));
            false
        }
        (true, Some(d)) => {
            let said =
                |why: String| println!("{} drain: waiting, eviction refused: {why}", host.name);
            match remove::drain(&d.cluster, &host.name, d.timeout, false, &said).await {
                Ok(done) => {
                    outcomes.push(step(
                        DRAIN,
                        Ok(format!("drained, {} pod(s) evicted", done.evicted.len())),
                    ));
                    true
                }
                Err(e) => {
                    outcomes.push(step(DRAIN, Err(format!("drain: {e} (left cordoned)"))));
                    false
                }
            }
        }
    };
    if outcomes.iter().all(|o| o.result.is_ok()) {
        for &i in mine {
            let result = put(&c, shell, &m.packages[i], run, false).await;
            let failed = result.is_err();
            outcomes.push(step(&m.packages[i].name, result));
            if failed {
                break;
            }
        }
    }
    if let (true, Some(d)) = (drained, drainer) {
        let result = match outcomes.iter().all(|o| o.result.is_ok()) {
            true => remove::uncordon(&d.cluster, &host.name)
                .await
                .map(|()| "uncordoned".to_owned()),
            false => Err("left cordoned after the failure".to_owned()),
        };
        outcomes.push(step(UNCORDON, result));
    }
    c.close().await;
    outcomes
}

/// Runs [`script`] for `p` on the host `c` is connected to: what it said it did (or, with `check`, whether it
/// is [`NEEDED`]), or why it failed.
async fn put(
    c: &Connection,
    shell: &str,
    p: &Package,
    run: &str,
    check: bool,
) -> Result<String, String> {
    match c
        .run(shell, script(p, run, check).as_bytes(), PER_PACKAGE)
        .await
    {
        Err(e) => Err(e.to_string()),
        Ok(out) if out.success() => {
            let said = String::from_utf8_lossy(&out.stdout);
            said.lines()
                .rev()
                .find_map(|l| l.strip_prefix(DONE).map(|d| d.trim().to_owned()))
                .ok_or_else(|| format!("the script ended without saying {DONE}"))
        }
        Ok(out) => Err(format!(
            "{} (exit status {}): {}",
            p.url,
            out.status
                .map_or_else(|| format!("signal {:?}", out.signal), |s| s.to_string()),
            out.tail(5)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(extra: &str) -> String {
        format!(
            r#"{{"owner": "site", "cluster": "c1", "packages": [{{"name": "hello", "version": "1.0", "groups": ["kube_node"],
               "url": "https://172.22.0.1:5000/files/site/c1/binary_images/hello-1.0", "sha256": "{}"{extra}}}]}}"#,
            "ab".repeat(32)
        )
    }

    #[test]
    fn the_reconcilers_manifest_reads_and_hostile_values_are_refused() {
        let m = Manifest::parse(&manifest("")).unwrap();
        assert_eq!(m.packages[0].version.as_deref(), Some("1.0"));
        for (field, value, want) in [
            (
                "name",
                r#""x;reboot""#,
                "packages[0] (x;reboot): name: not a package name",
            ),
            (
                "version",
                r#""1.0$(id)""#,
                "packages[0] (hello): version \"1.0$(id)\": not a version",
            ),
            (
                "url",
                r#""https://a/b'c""#,
                "packages[0] (hello): url \"https://a/b'c\": not a plain http(s) URL",
            ),
            (
                "url",
                r#""file:///etc/shadow""#,
                "packages[0] (hello): url \"file:///etc/shadow\": not a plain http(s) URL",
            ),
            (
                "sha256",
                r#""ABC""#,
                "packages[0] (hello): sha256 \"ABC\": not 64 lowercase hex digits",
            ),
            (
                "groups",
                r#"["etcd"]"#,
                "packages[0] (hello): groups: \"etcd\" is not kube_control_plane or kube_node",
            ),
            ("groups", "[]", "packages[0] (hello): groups: empty"),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(&manifest("")).unwrap();
            v["packages"][0][field] = serde_json::from_str(value).unwrap();
            assert_eq!(
                Manifest::parse(&v.to_string()).unwrap_err(),
                want,
                "{field} {value}"
            );
        }
    }

    #[test]
    fn packages_go_to_the_hosts_of_their_groups() {
        let inv = Inventory::parse(
            "[all]\nm ansible_host=10.0.0.1\nw ansible_host=10.0.0.2\n[kube_control_plane]\nm\n[kube_node]\nw\n",
        )
        .unwrap();
        let mut m = Manifest::parse(&manifest("")).unwrap();
        let mut both = m.packages[0].clone();
        both.name = "both".into();
        both.groups = vec!["kube_control_plane".into(), "kube_node".into()];
        m.packages.push(both);
        assert_eq!(packages_for(&inv, &m, "m"), [1]);
        assert_eq!(packages_for(&inv, &m, "w"), [0, 1]);
    }

    #[test]
    fn the_check_mode_downloads_and_says_needed_before_changing_anything() {
        let m = Manifest::parse(&manifest("")).unwrap();
        let check = script(&m.packages[0], "0123abcd", true);
        let needed = format!("echo \"{DONE} {NEEDED}\"\n  exit 0\n");
        // Each branch (a Debian package; a binary) says it is needed, and stops, before its first change.
        let (deb, binary) = check.split_once("\nelse\n").unwrap();
        for (branch, changes) in [
            (
                deb,
                &["ln -sf", "apt-get -q update", "apt-get -q install"][..],
            ),
            (
                binary,
                &[
                    "mkdir -p /usr/local/bin",
                    "cp \"$f\"",
                    "mv \"$target.part\"",
                ][..],
            ),
        ] {
            let stop = branch.find(&needed).expect("the branch says it is needed");
            for change in changes {
                assert!(
                    branch.find(change).unwrap() > stop,
                    "{change} before the check stops: {check}"
                );
            }
        }
        assert!(check.contains("download-file"), "{check}");
        let install = script(&m.packages[0], "0123abcd", false);
        assert!(!install.contains(NEEDED), "{install}");
    }

    #[test]
    fn the_script_checks_the_digest_it_was_given() {
        let m = Manifest::parse(&manifest("")).unwrap();
        let s = script(&m.packages[0], "0123abcd", false);
        let sha = "ab".repeat(32);
        assert!(s.contains(&format!("'SHA256:{sha}'")), "{s}");
        assert!(s.contains("target=/usr/local/bin/hello\n"), "{s}");
    }
}
