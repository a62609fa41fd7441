//! `foothold-agent vino-builder`: the node side of ViNO. It runs in the `vino-builder` container of the Vino's
//! DaemonSet, reads this node's VM plan (the ConfigMap `<vino>-node-<node>`, found by its labels
//! `vino.airshipit.org/vino` and `vino.airshipit.org/node`), and makes libvirt match it:
//!
//! - a `dir` storage pool (`--pool`, `--pool-dir`) with a qcow2 root volume `<vm>-root` per VM (rootDiskGb)
//!   and a volume per disk drive (`options.sizeGb`; raw and fully allocated unless `sparse`); volumes grow and
//!   never shrink;
//! - a libvirt network `vino-<namespace>-<vino>-<network>` per Vino network (`xml::network_xml`);
//! - a domain per VM (`xml::domain_xml`): vCPUs pinned to the host's CPUs less `cpuExclude`, memory, virtio
//!   disks, the allocated MACs, a serial console, a CD-ROM for Redfish virtual media, and VNC with the VM's own
//!   password (from the Secret the plan names) when `enableVNC`.
//!
//! Domains are defined and left off: Ironic powers them through sushy-tools. A domain is redefined only when
//! its rendering changed (a hash in its metadata); a changed network is replaced. Domains and networks of this
//! Vino that the plan no longer has are destroyed and undefined, with their volumes; a plan that disappears
//! removes them all. Domains not carrying this Vino's metadata are never touched.
//!
//! The builder watches its ConfigMap (no polling) and re-applies every `--resync-seconds` to repair drift. The
//! outcome goes into the ConfigMap's annotation `vino.airshipit.org/builder-status`.

pub mod virsh;
pub mod xml;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use crate::controllers::vino::STATUS_ANNOTATION;
use crate::controllers::vino::{NODE_LABEL, OWNER_LABEL};
use virsh::{quote, Virsh};
use xml::{Host, Plan};

/// How the builder reaches libvirt and renders domains.
#[derive(Clone, Debug)]
pub struct Options {
    /// libvirt URI (`qemu:///system` on a node).
    pub uri: String,
    pub pool: String,
    pub pool_dir: String,
    pub domain_type: String,
    pub cpus: BTreeSet<u32>,
    pub vnc_listen: String,
    /// Where rendered XML files are written for virsh.
    pub work_dir: PathBuf,
    pub command_timeout: Duration,
}

/// What one apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub networks_defined: Vec<String>,
    pub networks_unchanged: Vec<String>,
    pub networks_removed: Vec<String>,
    pub domains_defined: Vec<String>,
    pub domains_unchanged: Vec<String>,
    pub domains_removed: Vec<String>,
    pub volumes_created: Vec<String>,
    pub volumes_resized: Vec<String>,
}

impl Report {
    pub fn changed(&self) -> bool {
        !(self.networks_defined.is_empty()
            && self.networks_removed.is_empty()
            && self.domains_defined.is_empty()
            && self.domains_removed.is_empty()
            && self.volumes_created.is_empty()
            && self.volumes_resized.is_empty())
    }
}

fn write_xml(dir: &Path, name: &str, text: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.xml"));
    let tmp = dir.join(format!(".{name}.xml.tmp"));
    std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("renaming {}: {e}", path.display()))?;
    Ok(path)
}

fn lines(output: &str) -> BTreeSet<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A `Key: value` field from virsh's `*-info` output.
fn info_field(output: &str, key: &str) -> Option<String> {
    output.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

/// Makes libvirt match `plan` (None: the plan is gone, remove everything of `owner`). `vnc` holds the VNC
/// passwords by VM name.
pub async fn apply(
    virsh: &mut Virsh,
    opts: &Options,
    owner: &str,
    plan: Option<&Plan>,
    vnc: &BTreeMap<String, String>,
) -> Result<Report, String> {
    let host = Host {
        owner: owner.to_owned(),
        domain_type: opts.domain_type.clone(),
        cpus: opts.cpus.clone(),
        pool: opts.pool.clone(),
        vnc_listen: opts.vnc_listen.clone(),
    };
    let empty = Plan::default();
    let rendered = xml::render(&host, plan.unwrap_or(&empty), vnc)?;
    let e = |e: virsh::VirshError| e.to_string();
    let q = |w: &str| quote(w).map_err(|e| e.to_string());
    let mut report = Report::default();
    let work = opts.work_dir.join(owner.replace('/', "_"));

    // Observe the domains first: a planned name taken by a domain that is not ours stops everything before
    // anything changes.
    let existing = lines(&virsh.run("list --all --name").await.map_err(e)?);
    let mut ours = BTreeMap::new();
    let mut foreign = BTreeSet::new();
    for d in &existing {
        let dumped = virsh
            .run(&format!("dumpxml --inactive {}", q(d)?))
            .await
            .map_err(e)?;
        match xml::domain_marker(&dumped) {
            Some((o, hash)) if o == owner => {
                ours.insert(d.clone(), hash);
            }
            _ => {
                foreign.insert(d.clone());
            }
        }
    }
    if let Some(name) = rendered.domains.keys().find(|d| foreign.contains(*d)) {
        return Err(format!(
            "a domain named {name} exists and is not this Vino's ({owner}); it is left alone and VM {name} cannot be defined"
        ));
    }

    // The pool and volumes.
    if !rendered.volumes.is_empty() {
        let pool = q(&opts.pool)?;
        let info = match virsh.run(&format!("pool-info {pool}")).await {
            Ok(info) => info,
            Err(_) => {
                let file = write_xml(&work, "pool", &xml::pool_xml(&opts.pool, &opts.pool_dir))?;
                virsh
                    .run(&format!("pool-define {}", q(&file.to_string_lossy())?))
                    .await
                    .map_err(e)?;
                virsh.run(&format!("pool-build {pool}")).await.map_err(e)?;
                virsh
                    .run(&format!("pool-autostart {pool}"))
                    .await
                    .map_err(e)?;
                virsh.run(&format!("pool-info {pool}")).await.map_err(e)?
            }
        };
        if info_field(&info, "State").as_deref() != Some("running") {
            virsh.run(&format!("pool-start {pool}")).await.map_err(e)?;
        }
        for v in &rendered.volumes {
            let want = v.size_gb << 30;
            match virsh
                .run(&format!("vol-info --bytes --pool {pool} {}", q(&v.name)?))
                .await
            {
                Ok(info) => {
                    let have: u64 = info_field(&info, "Capacity")
                        .and_then(|c| c.split_whitespace().next().and_then(|n| n.parse().ok()))
                        .unwrap_or(0);
                    if have < want {
                        virsh
                            .run(&format!(
                                "vol-resize --pool {pool} {} {}G",
                                q(&v.name)?,
                                v.size_gb
                            ))
                            .await
                            .map_err(e)?;
                        report.volumes_resized.push(v.name.clone());
                    }
                }
                Err(_) => {
                    let kind = if v.sparse {
                        "--format qcow2".to_owned()
                    } else {
                        format!("--format raw --allocation {}G", v.size_gb)
                    };
                    virsh
                        .run(&format!(
                            "vol-create-as {pool} {} {}G {kind}",
                            q(&v.name)?,
                            v.size_gb
                        ))
                        .await
                        .map_err(e)?;
                    report.volumes_created.push(v.name.clone());
                }
            }
        }
    }

    // Networks: the UUID is a hash of the definition, so an equal UUID means an equal network.
    let existing_nets = lines(&virsh.run("net-list --all --name").await.map_err(e)?);
    for (name, text) in &rendered.networks {
        let want_uuid = text
            .split("<uuid>")
            .nth(1)
            .and_then(|r| r.split("</uuid>").next())
            .unwrap_or_default();
        let n = q(name)?;
        if existing_nets.contains(name) {
            let uuid = virsh.run(&format!("net-uuid {n}")).await.map_err(e)?;
            if uuid == want_uuid {
                report.networks_unchanged.push(name.clone());
            } else {
                let _ = virsh.run(&format!("net-destroy {n}")).await;
                virsh.run(&format!("net-undefine {n}")).await.map_err(e)?;
            }
        }
        if !report.networks_unchanged.contains(name) {
            let file = write_xml(&work, &format!("network-{name}"), text)?;
            virsh
                .run(&format!("net-define {}", q(&file.to_string_lossy())?))
                .await
                .map_err(e)?;
            virsh.run(&format!("net-autostart {n}")).await.map_err(e)?;
            report.networks_defined.push(name.clone());
        }
        let info = virsh.run(&format!("net-info {n}")).await.map_err(e)?;
        if info_field(&info, "Active").as_deref() != Some("yes") {
            virsh.run(&format!("net-start {n}")).await.map_err(e)?;
        }
    }

    // Domains.
    for (name, (text, hash)) in &rendered.domains {
        if ours.get(name) == Some(hash) {
            report.domains_unchanged.push(name.clone());
            continue;
        }
        let file = write_xml(&work, &format!("domain-{name}"), text)?;
        virsh
            .run(&format!("define {}", q(&file.to_string_lossy())?))
            .await
            .map_err(e)?;
        report.domains_defined.push(name.clone());
    }
    for name in ours.keys().filter(|d| !rendered.domains.contains_key(*d)) {
        let d = q(name)?;
        let state = virsh.run(&format!("domstate {d}")).await.map_err(e)?;
        if state.trim() != "shut off" {
            virsh.run(&format!("destroy {d}")).await.map_err(e)?;
        }
        virsh
            .run(&format!("undefine --remove-all-storage {d}"))
            .await
            .map_err(e)?;
        let _ = std::fs::remove_file(work.join(format!("domain-{name}.xml")));
        report.domains_removed.push(name.clone());
    }
    // Networks last, once no domain of ours uses them.
    let prefix = xml::network_prefix(owner);
    for name in existing_nets
        .iter()
        .filter(|n| n.starts_with(&prefix) && !rendered.networks.contains_key(*n))
    {
        let n = q(name)?;
        let _ = virsh.run(&format!("net-destroy {n}")).await;
        virsh.run(&format!("net-undefine {n}")).await.map_err(e)?;
        let _ = std::fs::remove_file(work.join(format!("network-{name}.xml")));
        report.networks_removed.push(name.clone());
    }
    Ok(report)
}

/// Where the builder finds its plan, and how it talks to libvirt.
pub struct Settings {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: String,
    pub vino: String,
    pub node: String,
    pub options: Options,
    pub resync: Duration,
}

/// What the builder reports on the plan ConfigMap.
#[derive(Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Status {
    /// sha256 of the plan.json applied (or tried).
    plan_sha256: String,
    networks: Vec<String>,
    domains: Vec<String>,
    error: Option<String>,
}

/// The plan in `cm`, and the VNC passwords it needs.
async fn read_plan(
    client: &kube::Client,
    ns: &str,
    cm: &ConfigMap,
) -> Result<(Plan, String, BTreeMap<String, String>), String> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("plan.json"))
        .ok_or_else(|| format!("ConfigMap {ns}/{} has no plan.json", cm.name_any()))?;
    let plan: Plan = serde_json::from_str(text)
        .map_err(|e| format!("ConfigMap {ns}/{} plan.json: {e}", cm.name_any()))?;
    let mut vnc = BTreeMap::new();
    if let Some(secret) = &plan.vnc_password_secret {
        let s = Api::<Secret>::namespaced(client.clone(), ns)
            .get(secret)
            .await
            .map_err(|e| format!("VNC password Secret {ns}/{secret}: {e}"))?;
        for (k, v) in s.data.unwrap_or_default() {
            vnc.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
    }
    Ok((plan, hex::encode(Sha256::digest(text.as_bytes())), vnc))
}

/// [`run`] on a runtime of its own: for the binary, which then compiles none of its futures again (see
/// `http::serve_blocking`).
pub fn run_blocking(settings: Settings) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(run(settings))
}

/// Runs until the process is stopped: watch the plan, apply it, report.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let client = loop {
        match crate::controllers::connect(settings.kubeconfig.as_deref()).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!("vino-builder: {e}; retrying in 5s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    let ns = &settings.namespace;
    let owner = format!("{ns}/{}", settings.vino);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let selector = format!(
        "{OWNER_LABEL}={},{NODE_LABEL}={}",
        settings.vino, settings.node
    );
    let mut events = watcher::watcher(maps.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    let mut current: Option<ConfigMap> = None;
    let mut listed: Option<ConfigMap> = None;
    let mut synced = false;
    let mut virsh: Option<Virsh> = None;
    let mut failures = 0u32;
    let mut next = tokio::time::Instant::now() + settings.resync;
    tracing::info!(%owner, node = %settings.node, uri = %settings.options.uri, "vino-builder watching {selector}");
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Init)) => { listed = None; continue }
                Some(Ok(Event::InitApply(cm))) => { listed = Some(cm); continue }
                Some(Ok(Event::InitDone)) => { current = listed.take(); synced = true; }
                Some(Ok(Event::Apply(cm))) => {
                    let same = current.as_ref().is_some_and(|c| c.data == cm.data);
                    current = Some(cm);
                    // Our own status annotation changes the object; the plan did not change.
                    if same { continue }
                }
                Some(Ok(Event::Delete(_))) => current = None,
                Some(Err(e)) => { tracing::warn!("watching {selector}: {e}"); continue }
                None => anyhow::bail!("the ConfigMap watch ended"),
            },
            _ = tokio::time::sleep_until(next) => {}
        }
        if !synced {
            continue;
        }
        let (outcome, plan_hash, report) =
            apply_current(&client, &settings, &owner, current.as_ref(), &mut virsh).await;
        match &outcome {
            Ok(()) => {
                failures = 0;
                next = tokio::time::Instant::now() + settings.resync;
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let wait = crate::controllers::common::backoff(failures).min(settings.resync);
                tracing::warn!("vino-builder: {err}; retrying in {wait:?}");
                next = tokio::time::Instant::now() + wait;
            }
        }
        if let Some(r) = &report {
            if r.changed() {
                tracing::info!(report = %serde_json::to_string(r).unwrap_or_default(), "libvirt updated");
            }
        }
        if let Some(cm) = &current {
            let status = Status {
                plan_sha256: plan_hash,
                networks: report
                    .as_ref()
                    .map(|r| [r.networks_defined.clone(), r.networks_unchanged.clone()].concat())
                    .unwrap_or_default(),
                domains: report
                    .as_ref()
                    .map(|r| [r.domains_defined.clone(), r.domains_unchanged.clone()].concat())
                    .unwrap_or_default(),
                error: outcome.err(),
            };
            let mut status = status;
            status.networks.sort();
            status.domains.sort();
            let text = serde_json::to_string(&status).expect("serializes");
            if cm.annotations().get(STATUS_ANNOTATION) != Some(&text) {
                let patch =
                    serde_json::json!({"metadata": {"annotations": {STATUS_ANNOTATION: text}}});
                if let Err(e) = maps
                    .patch(
                        &cm.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                {
                    tracing::warn!("reporting on ConfigMap {ns}/{}: {e}", cm.name_any());
                }
            }
        }
    }
}

async fn apply_current(
    client: &kube::Client,
    settings: &Settings,
    owner: &str,
    cm: Option<&ConfigMap>,
    virsh: &mut Option<Virsh>,
) -> (Result<(), String>, String, Option<Report>) {
    let (plan, hash, vnc) = match cm {
        Some(cm) => match read_plan(client, &settings.namespace, cm).await {
            Ok((p, h, v)) => (Some(p), h, v),
            Err(e) => return (Err(e), String::new(), None),
        },
        None => (None, String::new(), BTreeMap::new()),
    };
    if let Some(p) = &plan {
        if p.node != settings.node {
            return (
                Err(format!(
                    "the plan is for node {}, this is {}",
                    p.node, settings.node
                )),
                hash,
                None,
            );
        }
    }
    if !virsh.as_mut().is_some_and(Virsh::alive) {
        match Virsh::connect(&settings.options.uri, settings.options.command_timeout).await {
            Ok(v) => *virsh = Some(v),
            Err(e) => return (Err(e.to_string()), hash, None),
        }
    }
    let v = virsh.as_mut().expect("connected");
    match apply(v, &settings.options, owner, plan.as_ref(), &vnc).await {
        Ok(r) => (Ok(()), hash, Some(r)),
        Err(e) => (Err(e), hash, None),
    }
}
