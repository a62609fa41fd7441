//! `install-software`: a `Software`'s packages (`packages.json`, written by the BPA's Software reconciler) put on
//! the hosts of their groups over SSH. Each host downloads each of its packages itself from the agent's file
//! server (apt's `apt-helper`, checking the sha256 the manifest records and the site CA apt is configured with),
//! keeps it by its sha256, and installs it: a Debian package through apt (its dependencies from the agent's apt
//! repository), anything else as an executable in `/usr/local/bin/<name>`. Each step is skipped when its result
//! is already there, so a second run over a half-installed cluster converges. One line per host and package
//! reports what happened; a failure names the host, the package and the output's tail.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt as _};
use russh::keys::PrivateKey;
use serde::Deserialize;

use crate::controllers::common::host_report::{HostReport, HostState};
use crate::digest::{Algorithm, Digest};
use crate::installer::inventory::{Host, Inventory};
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

/// The shell script (run by `sh -s` as root) that puts `p` on a host. Every value in it was checked by
/// [`Manifest::parse`]. `run` names this installer run (letters and digits): apt's index is updated once per
/// host and run, by the first package that needs it.
pub fn script(p: &Package, run: &str) -> String {
    let (name, sha, url) = (&p.name, &p.sha256, &p.url);
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
  ln -sf "$f" "$dir/$pkg.deb"
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
  mkdir -p /usr/local/bin
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

/// How one package went on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub host: String,
    pub package: String,
    /// What the host said it did (`deb hello 1.0 installed`, `binary /usr/local/bin/x already installed`), or
    /// why it failed (the step and the output's tail).
    pub result: Result<String, String>,
}

/// How long one package may take on one host: a download and an apt install on a slow node.
const PER_PACKAGE: Duration = Duration::from_secs(20 * 60);
const CONNECT: Duration = Duration::from_secs(60);

/// What a run did: every (host, package) it tried, in inventory order, and the hosts it did not start because an
/// earlier one failed (with that host's name).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Run {
    pub outcomes: Vec<Outcome>,
    pub skipped: Vec<(String, String)>,
}

impl Run {
    /// One line per host for the Software's status: `Failed` if a package failed there, `Updated` if one was
    /// installed, `Unchanged` if all were already there, `Skipped` if it was not started.
    pub fn report(&self) -> Vec<HostReport> {
        let mut hosts: Vec<HostReport> = Vec::new();
        for o in &self.outcomes {
            let (state, said) = match &o.result {
                Err(why) => (HostState::Failed, format!("{}: {why}", o.package)),
                Ok(done) if done.ends_with("already installed") => {
                    (HostState::Unchanged, done.clone())
                }
                Ok(done) => (HostState::Updated, done.clone()),
            };
            match hosts.iter_mut().find(|h| h.host == o.host) {
                Some(h) => {
                    h.state = worse(h.state, state);
                    h.detail = format!("{}; {said}", h.detail);
                }
                None => hosts.push(HostReport {
                    host: o.host.clone(),
                    state,
                    detail: said,
                }),
            }
        }
        hosts.extend(self.skipped.iter().map(|(host, first)| HostReport {
            host: host.clone(),
            state: HostState::Skipped,
            detail: format!("not started: {first} failed first"),
        }));
        hosts
    }
}

/// The state a host with packages in states `a` and `b` is in: a failure outweighs an update, an update an
/// unchanged package.
fn worse(a: HostState, b: HostState) -> HostState {
    let rank = |s| match s {
        HostState::Failed => 3,
        HostState::Updated => 2,
        HostState::Skipped => 1,
        HostState::Unchanged => 0,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// Puts every package on the hosts of its groups: `at_once` hosts at a time (the Software's `maxUnavailable`), in
/// inventory order, each host's packages one after another. The first host with a failed package (or that
/// cannot be reached) stops the rollout: hosts not yet started are skipped, those under way finish.
pub async fn install(
    inv: &Inventory,
    m: &Manifest,
    key: Arc<PrivateKey>,
    default_user: &str,
    known: &KnownHosts,
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
        on_host(host, mine, m, key.clone(), default_user, known, &run)
    })
    .await
}

/// A host's packages' outcomes, or the host skipped: its name and the host that failed first.
type Tried = Result<Vec<Outcome>, (String, String)>;

/// The rollout's order and its stop, apart from SSH: `install` on each host of `hosts` (with its packages), at
/// most `at_once` at a time, no new host once one has failed.
async fn roll_out<'h, F, Fut>(
    hosts: &'h [(&'h Host, Vec<usize>)],
    at_once: usize,
    install: F,
) -> Run
where
    F: Fn(&'h Host, &'h [usize]) -> Fut,
    Fut: std::future::Future<Output = Vec<Outcome>>,
{
    let first_failed: RefCell<Option<String>> = RefCell::new(None);
    let mut done: Vec<(usize, Tried)> = stream::iter(hosts.iter().enumerate())
        .map(|(i, (host, mine))| {
            let (first_failed, install) = (&first_failed, &install);
            async move {
                let stopped = first_failed.borrow().clone();
                if let Some(first) = stopped {
                    return (i, Err((host.name.clone(), first)));
                }
                let outcomes = install(host, mine).await;
                if outcomes.iter().any(|o| o.result.is_err()) {
                    first_failed
                        .borrow_mut()
                        .get_or_insert_with(|| host.name.clone());
                }
                (i, Ok(outcomes))
            }
        })
        .buffer_unordered(at_once.max(1))
        .collect()
        .await;
    done.sort_by_key(|(i, _)| *i);
    let mut run = Run::default();
    for (_, r) in done {
        match r {
            Ok(outcomes) => run.outcomes.extend(outcomes),
            Err(skipped) => run.skipped.push(skipped),
        }
    }
    run
}

/// Host `host`'s packages `mine` (indices into `m.packages`), one after another over one SSH connection; every
/// package fails with the connection's error if the host cannot be reached.
async fn on_host(
    host: &Host,
    mine: &[usize],
    m: &Manifest,
    key: Arc<PrivateKey>,
    default_user: &str,
    known: &KnownHosts,
    run: &str,
) -> Vec<Outcome> {
    let target = Target::of(host, default_user);
    let outcome = |i: usize, result| Outcome {
        host: host.name.clone(),
        package: m.packages[i].name.clone(),
        result,
    };
    let c = match Connection::open(&target, key, known, CONNECT).await {
        Ok(c) => c,
        Err(e) => {
            return mine
                .iter()
                .map(|&i| outcome(i, Err(e.to_string())))
                .collect()
        }
    };
    let shell = target.root_shell();
    let mut outcomes = Vec::new();
    for &i in mine {
        let p = &m.packages[i];
        let result = match c.run(shell, script(p, run).as_bytes(), PER_PACKAGE).await {
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
        };
        outcomes.push(outcome(i, result));
    }
    c.close().await;
    outcomes
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
    fn the_script_checks_the_digest_it_was_given() {
        let m = Manifest::parse(&manifest("")).unwrap();
        let s = script(&m.packages[0], "0123abcd");
        let sha = "ab".repeat(32);
        assert!(s.contains(&format!("'SHA256:{sha}'")), "{s}");
        assert!(s.contains("target=/usr/local/bin/hello\n"), "{s}");
    }

    /// `n` (at least one) hosts `h0`…, `h0` the control plane, all of them nodes.
    fn hosts(n: usize) -> Inventory {
        let mut text = String::from("[all]\n");
        for i in 0..n {
            text.push_str(&format!("h{i} ansible_host=10.0.0.{}\n", i + 1));
        }
        text.push_str("[kube_control_plane]\nh0\n[kube_node]\n");
        for i in 0..n {
            text.push_str(&format!("h{i}\n"));
        }
        Inventory::parse(&text).unwrap()
    }

    /// A rollout of `n` hosts, `at_once` at a time, where the hosts in `failing` fail: the run, and the most
    /// hosts that were under way at once. Each fake install yields a few times so that the others interleave.
    fn rollout(n: usize, at_once: usize, failing: &[usize]) -> (Run, usize) {
        let inv = hosts(n);
        let hosts: Vec<(&Host, Vec<usize>)> =
            inv.members().into_iter().map(|h| (h, vec![0])).collect();
        let (busy, most) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let run = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(roll_out(&hosts, at_once, |host, _| {
                let (busy, most) = (&busy, &most);
                async move {
                    busy.set(busy.get() + 1);
                    most.set(most.get().max(busy.get()));
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                    busy.set(busy.get() - 1);
                    let i: usize = host.name[1..].parse().unwrap();
                    let result = match failing.contains(&i) {
                        true => Err("exit status 100".to_owned()),
                        false => Ok("deb hello 1.1 installed".to_owned()),
                    };
                    vec![Outcome {
                        host: host.name.clone(),
                        package: "hello".into(),
                        result,
                    }]
                }
            }));
        (run, most.get())
    }

    #[test]
    fn hosts_go_one_at_a_time_by_default_and_the_first_failure_stops_the_rest() {
        let (run, most) = rollout(4, 1, &[1]);
        assert_eq!(most, 1);
        let ran: Vec<&str> = run.outcomes.iter().map(|o| o.host.as_str()).collect();
        assert_eq!(ran, ["h0", "h1"]);
        assert_eq!(
            run.skipped,
            [("h2".into(), "h1".into()), ("h3".into(), "h1".into())]
        );
        let report = run.report();
        let states: Vec<(&str, HostState)> =
            report.iter().map(|h| (h.host.as_str(), h.state)).collect();
        assert_eq!(
            states,
            [
                ("h0", HostState::Updated),
                ("h1", HostState::Failed),
                ("h2", HostState::Skipped),
                ("h3", HostState::Skipped)
            ]
        );
        assert_eq!(report[1].detail, "hello: exit status 100");
        assert_eq!(report[2].detail, "not started: h1 failed first");
    }

    #[test]
    fn a_host_s_state_is_its_worst_package_s() {
        let run = Run {
            outcomes: vec![
                Outcome {
                    host: "m".into(),
                    package: "a".into(),
                    result: Ok("deb a 1.0 already installed".into()),
                },
                Outcome {
                    host: "m".into(),
                    package: "b".into(),
                    result: Ok("binary /usr/local/bin/b installed".into()),
                },
                Outcome {
                    host: "w".into(),
                    package: "a".into(),
                    result: Ok("deb a 1.0 already installed".into()),
                },
                Outcome {
                    host: "x".into(),
                    package: "a".into(),
                    result: Err("unreachable".into()),
                },
                Outcome {
                    host: "x".into(),
                    package: "b".into(),
                    result: Ok("binary /usr/local/bin/b installed".into()),
                },
            ],
            skipped: vec![],
        };
        let report = run.report();
        assert_eq!(report[0].state, HostState::Updated);
        assert_eq!(
            report[0].detail,
            "deb a 1.0 already installed; binary /usr/local/bin/b installed"
        );
        assert_eq!(report[1].state, HostState::Unchanged);
        assert_eq!(report[2].state, HostState::Failed);
    }

    proptest::proptest! {
        /// Never more hosts under way than `maxUnavailable`; every host is either tried once or skipped once;
        /// none is skipped without a failure, and none started after the first failure was seen (with one at a
        /// time: exactly the hosts after the first failing one are skipped).
        #[test]
        fn a_rollout_never_disrupts_more_hosts_than_allowed(
            n in 1..12usize,
            at_once in 1..5usize,
            failing in proptest::collection::btree_set(0..12usize, 0..3),
        ) {
            let failing: Vec<usize> = failing.into_iter().collect();
            let (run, most) = rollout(n, at_once, &failing);
            proptest::prop_assert!(most <= at_once);
            proptest::prop_assert_eq!(run.outcomes.len() + run.skipped.len(), n);
            let failed_any = run.outcomes.iter().any(|o| o.result.is_err());
            proptest::prop_assert!(run.skipped.is_empty() || failed_any);
            if at_once == 1 {
                let first = failing.iter().copied().filter(|&i| i < n).min();
                let tried = first.map_or(n, |f| f + 1);
                proptest::prop_assert_eq!(run.outcomes.len(), tried);
            }
        }
    }
}
